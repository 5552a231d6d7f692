import { Suspense, useEffect, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ApiError } from "./api/client";
import { LANGUAGES, setLanguage, type Language } from "./i18n";
import { useChooseOrganization, useWorkingOrganization } from "./organization";
import { PAGES, PUBLIC_PAGES } from "./pageTable";
import { Link, match, navigate, useLocation } from "./router";
import { arrived, keepReturn, returnPath, useMe, type User } from "./session";
import { applyTheme, storedTheme, THEMES, type Theme } from "./theme";
import { ErrorNote, Loading } from "./ui";

/// Whether a signed-out reader may see `path`.
export function isPublic(path: string): boolean {
  return PUBLIC_PAGES.some((page) => match(page.path, path));
}

export function App() {
  const url = useLocation();
  const me = useMe();
  const path = url.pathname;

  useEffect(() => {
    if (me.data && !isPublic(path)) arrived(path);
    if (me.data === null && !isPublic(path)) {
      keepReturn(url);
      navigate(`/sign-in?return=${encodeURIComponent(path + url.search)}`, true);
    } else if (me.data && isPublic(path)) {
      navigate(returnPath(url), true);
    } else if (me.data && path === "/") {
      navigate("/clusters", true);
    }
  }, [me.data, path, url]);

  if (isPublic(path) && !me.data) {
    const page = PUBLIC_PAGES.find((p) => match(p.path, path));
    return <Shell user={null}>{page && <page.component />}</Shell>;
  }
  if (me.isPending) return <Loading />;
  if (me.error) return <ErrorNote error={me.error} />;
  if (!me.data) return <Loading />;
  return (
    <Shell user={me.data}>
      <Routes path={path} user={me.data} />
    </Shell>
  );
}

function Routes({ path, user }: { path: string; user: User }) {
  const { t } = useTranslation();
  for (const page of PAGES) {
    const params = match(page.path, path);
    if (!params) continue;
    if (page.role && user.role !== page.role) return <ErrorNote error={new ApiError(403, undefined)} />;
    return (
      <Suspense fallback={<Loading />}>
        <page.component path={path} params={params} user={user} />
      </Suspense>
    );
  }
  return (
    <section className="page">
      <h1>{t("errors.no_page")}</h1>
      <Link href="/clusters">{t("nav.clusters")}</Link>
    </section>
  );
}

function Shell({ user, children }: { user: User | null; children: React.ReactNode }) {
  const { t, i18n } = useTranslation();
  const client = useQueryClient();
  const signOut = async () => {
    await api.POST("/api/auth/logout");
    client.clear();
    client.setQueryData(["me"], null);
    navigate("/sign-in", true);
  };
  return (
    <>
      <a className="skip" href="#main">
        {t("nav.skip")}
      </a>
      <header className="top">
        <Link href={user ? "/clusters" : "/sign-in"} className="brand">
          KubeBYON
        </Link>
        {user && (
          <nav aria-label={t("nav.main")}>
            {PAGES.filter((page) => page.nav && (!page.role || page.role === user.role)).map((page) => (
              <Link key={page.path} href={page.href ?? page.path}>
                {t(page.nav!)}
              </Link>
            ))}
          </nav>
        )}
        <div className="spacer" />
        {user && <OrganizationSwitcher />}
        <label className="language">
          <span className="sr-only">{t("nav.language")}</span>
          <select value={i18n.language} onChange={(e) => setLanguage(e.target.value as Language)}>
            {LANGUAGES.map((l) => (
              <option key={l} value={l}>
                {t(`language.${l}`)}
              </option>
            ))}
          </select>
        </label>
        <ThemeChoice />
        {user && (
          <>
            <span className="who">{user.email}</span>
            <button type="button" onClick={signOut}>
              {t("nav.sign_out")}
            </button>
          </>
        )}
      </header>
      <main id="main">{children}</main>
    </>
  );
}

/// The organization this tab works in, on every page: lists, creates and
/// billing act in it.
function OrganizationSwitcher() {
  const { t } = useTranslation();
  const { list, here } = useWorkingOrganization();
  const choose = useChooseOrganization();
  if (list.length < 2 || !here) return null;
  return (
    <select
      className="organization"
      aria-label={t("nav.organization")}
      value={here.id}
      onChange={(e) => choose(list.find((o) => o.id === e.target.value) ?? null)}
    >
      {list.map((o) => (
        <option key={o.id} value={o.id}>
          {o.personal ? t("nav.personal_organization") : o.name}
        </option>
      ))}
    </select>
  );
}

/// Light, dark, or as the system says.
function ThemeChoice() {
  const { t } = useTranslation();
  const [theme, setTheme] = useState(storedTheme);
  return (
    <label className="theme">
      <span className="sr-only">{t("nav.theme")}</span>
      <select
        value={theme}
        onChange={(e) => {
          const chosen = e.target.value as Theme;
          applyTheme(chosen);
          setTheme(chosen);
        }}
      >
        {THEMES.map((value) => (
          <option key={value} value={value}>
            {t(`theme.${value}`)}
          </option>
        ))}
      </select>
    </label>
  );
}
