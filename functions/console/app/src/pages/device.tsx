// Signing in a terminal (`kubebyon login`, the OAuth device grant): the
// reader types the code the terminal shows (or follows its link, which
// fills it in), sees which device asks and from where, and approves it
// with their password, or denies it. The device then receives an API key
// listed under Account → API keys, where it is revoked.
import { useState, type FormEvent } from "react";
import { useMutation } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import type { PageProps } from "../page";
import { Link, useLocation } from "../router";
import { KeyTerms, keyTermsOf } from "../components/keyTerms";
import { ErrorNote, Field, Page, Time } from "../ui";
import type catalog from "./device.en.json";

type DeviceCatalog = typeof catalog;
declare module "../i18n" {
  interface PageCatalogs extends DeviceCatalog {}
}

type DeviceRequest = Schemas["DeviceRequest"];

export function Device({ user }: PageProps) {
  const { t } = useTranslation();
  const url = useLocation();
  const [code, setCode] = useState(url.searchParams.get("code") ?? "");
  const inspect = useMutation({
    mutationFn: (user_code: string): Promise<DeviceRequest> =>
      ok(api.POST("/api/console/account/device/inspect", { body: { user_code } })),
  });
  const approve = useMutation({
    mutationFn: (body: Schemas["ApproveDevice"]): Promise<DeviceRequest> =>
      ok(api.POST("/api/console/account/device/approve", { body })),
  });
  const deny = useMutation({
    mutationFn: (user_code: string): Promise<DeviceRequest> =>
      ok(api.POST("/api/console/account/device/deny", { body: { user_code } })),
  });
  const lookUp = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    approve.reset();
    deny.reset();
    inspect.mutate(code);
  };
  const submitApproval = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    approve.mutate({ user_code: code, ...keyTermsOf(form, user) });
  };
  const request = inspect.data;
  const decided = approve.data ?? deny.data;
  return (
    <Page title={t("device.title")}>
      {decided ? (
        <p role="status">
          {decided.status === "approved" ? t("device.approved", { device: decided.device_name }) : t("device.denied")}{" "}
          {decided.status === "approved" && <Link href="/account?tab=keys">{t("device.to_keys")}</Link>}
        </p>
      ) : (
        <>
          <p>{t("device.intro")}</p>
          <form className="card" onSubmit={lookUp}>
            <Field label={t("device.code")} hint={t("device.code_hint")}>
              <input
                name="user_code"
                value={code}
                onChange={(e) => setCode(e.target.value)}
                autoComplete="off"
                autoCapitalize="characters"
                spellCheck={false}
                maxLength={32}
                required
              />
            </Field>
            <ErrorNote error={inspect.error} />
            <button type="submit" disabled={inspect.isPending}>
              {t("device.look_up")}
            </button>
          </form>
          {request && (
            <form className="card" onSubmit={submitApproval}>
              <h2>{t("device.asking", { device: request.device_name })}</h2>
              <dl>
                <dt>{t("device.address")}</dt>
                <dd>{request.ip ?? "—"}</dd>
                <dt>{t("device.program")}</dt>
                <dd>{request.user_agent ?? "—"}</dd>
                <dt>{t("device.asked")}</dt>
                <dd>
                  <Time value={request.created_at} />
                </dd>
                <dt>{t("device.expires")}</dt>
                <dd>
                  <Time value={request.expires_at} />
                </dd>
              </dl>
              {!request.from_your_address && (
                <p role="alert" className="error">
                  {t("device.elsewhere")}
                </p>
              )}
              <p>{t("device.warning")}</p>
              <KeyTerms user={user} scope="write" />
              <ErrorNote error={approve.error ?? deny.error} />
              <div className="row">
                <button type="submit" className="primary" disabled={approve.isPending || deny.isPending}>
                  {t("device.approve")}
                </button>
                <button type="button" disabled={approve.isPending || deny.isPending} onClick={() => deny.mutate(code)}>
                  {t("device.deny")}
                </button>
              </div>
            </form>
          )}
        </>
      )}
    </Page>
  );
}
