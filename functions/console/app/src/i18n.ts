// Every string the console shows comes from these catalogs
// (test/i18n.test.mjs fails on a key missing from either). The choice is
// remembered in localStorage; the first visit follows the browser.
import i18n from "i18next";
import { initReactI18next } from "react-i18next";
import en from "./locales/en.json";
import zhCN from "./locales/zh-CN.json";

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
  resources: { en: { translation: en }, "zh-CN": { translation: zhCN } },
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
