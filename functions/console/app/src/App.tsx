import { lazy, Suspense, useEffect } from "react";
import { useQuery, useQueryClient, type QueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ApiError, ok, type Schemas } from "./api/client";
import { LANGUAGES, setLanguage, type Language } from "./i18n";
import { PUBLIC_PAGES } from "./clientRoutes";
import { Link, match, navigate, useLocation } from "./router";
import { ErrorNote, Loading } from "./ui";
import { ConfirmEmail, ResetPassword, SignIn, SignUp } from "./pages/auth";
import { ClusterList, CreateCluster } from "./pages/clusters";
import { ClusterDetail } from "./pages/cluster";
import { NodeDetail } from "./pages/nodes";
import { Account } from "./pages/account";
import { Billing } from "./pages/billing";

const Admin = lazy(() => import("./pages/admin"));

export type User = Schemas["User"];


/// Forgets the session and sends the reader to sign in, to come back here.
export function signInAgain(client: QueryClient) {
  client.setQueryData(["me"], null);
  if (PUBLIC_PAGES.includes(location.pathname)) return;
  const back = location.pathname + location.search;
  navigate(`/sign-in?return=${encodeURIComponent(back)}`, true);
}

/// Where to go after signing in: the page that asked, on this origin only.
export function returnPath(url: URL): string {
  const back = url.searchParams.get("return");
  return back && back.startsWith("/") && !back.startsWith("//") && !back.startsWith("/\\") ? back : "/clusters";
}

export function useMe() {
  return useQuery({
    queryKey: ["me"],
    queryFn: () =>
      ok(api.GET("/api/auth/me")).catch((error) => {
        if (error instanceof ApiError && error.status === 401) return null;
        throw error;
      }),
    staleTime: 60_000,
  });
}

export function App() {
  const url = useLocation();
  const me = useMe();
  const path = url.pathname;

  useEffect(() => {
    if (me.data === null && !PUBLIC_PAGES.includes(path)) {
      navigate(`/sign-in?return=${encodeURIComponent(path + url.search)}`, true);
    } else if (me.data && PUBLIC_PAGES.includes(path)) {
      navigate(returnPath(url), true);
    } else if (me.data && path === "/") {
      navigate("/clusters", true);
    }
  }, [me.data, path, url]);

  if (PUBLIC_PAGES.includes(path) && !me.data) {
    return (
      <Shell user={null}>
        {path === "/sign-in" && <SignIn />}
        {path === "/sign-up" && <SignUp />}
        {path === "/confirm" && <ConfirmEmail />}
        {path === "/reset-password" && <ResetPassword />}
      </Shell>
    );
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
  let params;
  if (path === "/clusters") return <ClusterList />;
  if (path === "/clusters/new") return <CreateCluster />;
  if ((params = match("/clusters/:id/nodes/:node", path))) return <NodeDetail clusterId={params.id} nodeId={params.node} />;
  if ((params = match("/clusters/:id", path))) return <ClusterDetail id={params.id} />;
  if (path === "/account") return <Account user={user} />;
  if (path === "/billing") return <Billing />;
  if (path.startsWith("/admin")) {
    if (user.role !== "admin") return <ErrorNote error={new ApiError(403, undefined)} />;
    return (
      <Suspense fallback={<Loading />}>
        <Admin path={path} />
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
            <Link href="/clusters">{t("nav.clusters")}</Link>
            <Link href="/billing">{t("nav.billing")}</Link>
            <Link href="/account">{t("nav.account")}</Link>
            {user.role === "admin" && <Link href="/admin/users">{t("nav.admin")}</Link>}
          </nav>
        )}
        <div className="spacer" />
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
