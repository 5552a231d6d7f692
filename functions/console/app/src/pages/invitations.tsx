// An invitation into an organization, from the link its email carries
// (`/invitations#token=…`): the reader, signed in as the invited address,
// accepts or declines it. The token stays in the URL's fragment, which the
// browser never sends to a server.
import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import type { PageProps } from "../page";
import { Link } from "../router";
import { ErrorNote, Page } from "../ui";
import type catalog from "./invitations.en.json";

type InvitationsCatalog = typeof catalog;
declare module "../i18n" {
  interface PageCatalogs extends InvitationsCatalog {}
}

type Invitation = Schemas["Invitation"];

/// The token of the link, from the fragment.
function tokenOf(hash: string): string | null {
  return new URLSearchParams(hash.replace(/^#/, "")).get("token");
}

export function Invitations({ user }: PageProps) {
  const { t } = useTranslation();
  const queries = useQueryClient();
  const token = tokenOf(location.hash);
  const answer = useMutation({
    mutationFn: (how: "accept" | "decline"): Promise<Invitation> =>
      ok(api.POST(`/api/console/organizations/invitations/${how}`, { body: { token: token ?? "" } })),
    onSuccess: () => queries.invalidateQueries(),
  });
  if (!token) {
    return (
      <Page title={t("invitations.title")}>
        <p>{t("invitations.no_token")}</p>
      </Page>
    );
  }
  const done = answer.data;
  return (
    <Page title={t("invitations.title")}>
      {done ? (
        <p role="status">
          {done.status === "accepted"
            ? t("invitations.accepted", { role: t(`invitations.role.${done.role}`) })
            : t("invitations.declined")}{" "}
          <Link href="/clusters">{t("invitations.to_clusters")}</Link>
        </p>
      ) : (
        <>
          <p>{t("invitations.prompt", { email: user.email })}</p>
          <div className="row">
            <button type="button" className="primary" disabled={answer.isPending} onClick={() => answer.mutate("accept")}>
              {t("invitations.accept")}
            </button>
            <button type="button" disabled={answer.isPending} onClick={() => answer.mutate("decline")}>
              {t("invitations.decline")}
            </button>
          </div>
          <ErrorNote error={answer.error} />
        </>
      )}
    </Page>
  );
}
