// Every string the console shows comes from these catalogs: the shared ones
// in locales/ and the ones a page brings beside it, pages/<page>.<language>.json
// (test/i18n.test.mjs fails on a key missing from a language or written
// twice). The choice is remembered in localStorage; the first visit follows
// the browser.
//
// Keys are typed: `t` takes only a key of the English catalogs, so a typo or
// a key a catalog lacks fails the build, and a key built from an API value
// (`status.${cluster.status}`) is checked for every value the API's type
// allows. A page adds its own catalog's keys where it is written:
//   import type catalog from "./labels.en.json";
//   type Labels = typeof catalog;
//   declare module "../i18n" { interface PageCatalogs extends Labels {} }
import i18n, { type ParseKeys } from "i18next";
import { initReactI18next } from "react-i18next";
import en from "./locales/en.json";
import zhCN from "./locales/zh-CN.json";

/** The keys of the pages' own catalogs, each page adding its own. */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface PageCatalogs {}

declare module "i18next" {
  interface CustomTypeOptions {
    defaultNS: "translation";
    resources: { translation: typeof en & PageCatalogs };
    keySeparator: false;
    nsSeparator: false;
    returnNull: false;
  }
}

/** A key of the catalogs. */
export type Key = ParseKeys;
/** What follows `P` in the keys that start with it: `KeysUnder<"setting.">`. */
export type KeysUnder<P extends string> = Key extends infer K ? (K extends `${P}${infer S}` ? S : never) : never;

type Catalog = Record<string, string>;
const pagesEn = import.meta.glob<Catalog>("./pages/*.en.json", { eager: true, import: "default" });
const pagesZhCN = import.meta.glob<Catalog>("./pages/*.zh-CN.json", { eager: true, import: "default" });
const catalog = (shared: Catalog, pages: Record<string, Catalog>): Catalog =>
  Object.assign({}, shared, ...Object.values(pages));

export const LANGUAGES = ["en", "zh-CN"] as const;
export type Language = (typeof LANGUAGES)[number];
const STORAGE_KEY = "kubebyon.language";

function initial(): Language {
  const stored = localStorage.getItem(STORAGE_KEY);
  if (stored === "en" || stored === "zh-CN") return stored;
  return navigator.languages.some((l) => l.toLowerCase().startsWith("zh")) ? "zh-CN" : "en";
}

export function setLanguage(language: Language) {
  localStorage.setItem(STORAGE_KEY, language);
  void i18n.changeLanguage(language);
}

i18n.on("languageChanged", (language) => {
  document.documentElement.lang = language;
});

void i18n.use(initReactI18next).init({
  resources: {
    en: { translation: catalog(en, pagesEn) },
    "zh-CN": { translation: catalog(zhCN, pagesZhCN) },
  },
  lng: initial(),
  fallbackLng: false,
  // Flat catalogs: a key is the whole string ("status.ready"), so a stage
  // the API reports in words is a key as it stands.
  keySeparator: false,
  nsSeparator: false,
  interpolation: { escapeValue: false },
  returnNull: false,
});

export default i18n;
