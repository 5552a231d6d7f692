// Sign up, confirm the emailed code, sign in, reset the password.
import { useState, type FormEvent } from "react";
import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok, type Schemas } from "../api/client";
import { returnPath } from "../session";
import { Link, navigate, useLocation } from "../router";
import { ErrorNote, Field, formValue, Page } from "../ui";
import { keys } from "../queryKeys";

function useSignedIn() {
  const client = useQueryClient();
  const url = useLocation();
  return (started: Schemas["SessionStarted"]) => {
    client.setQueryData(["me"], started.user);
    navigate(returnPath(url), true);
  };
}

/// What this platform offers at sign-in: configured OAuth providers, and
/// whether it asks for a captcha (which the console does not draw yet).
function useLoginOptions() {
  return useQuery({ queryKey: keys.loginOptions(), queryFn: () => ok(api.GET("/api/auth/providers")), staleTime: 60_000 });
}

function CaptchaNote() {
  const { t } = useTranslation();
  const options = useLoginOptions();
  return options.data?.captcha_required ? <p className="note">{t("auth.captcha_note")}</p> : null;
}

export function SignIn() {
  const { t } = useTranslation();
  const signedIn = useSignedIn();
  const url = useLocation();
  const login = useMutation({
    mutationFn: (body: Schemas["Login"]) => ok(api.POST("/api/auth/login", { body })),
    onSuccess: signedIn,
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    login.mutate({ email: formValue(form, "email"), password: formValue(form, "password") });
  };
  const back = url.searchParams.get("return");
  const options = useLoginOptions();
  return (
    <Page title={t("auth.sign_in")}>
      <form className="card narrow" onSubmit={submit}>
        <Field label={t("auth.email")}>
          <input name="email" type="email" autoComplete="username" required />
        </Field>
        <Field label={t("auth.password")}>
          <input name="password" type="password" autoComplete="current-password" required />
        </Field>
        <ErrorNote error={login.error} />
        <button type="submit" className="primary" disabled={login.isPending}>
          {t("auth.sign_in")}
        </button>
        <CaptchaNote />
        <div className="oauth">
          {(["github", "google"] as const).filter((provider) => options.data?.[provider]).map((provider) => (
            <a
              key={provider}
              className="button"
              href={`/api/auth/oauth/${provider}/start?return_to=${encodeURIComponent(back ?? "/clusters")}`}
            >
              {t(`auth.with_${provider}`)}
            </a>
          ))}
        </div>
        <p>
          <Link href="/sign-up">{t("auth.no_account")}</Link> · <Link href="/reset-password">{t("auth.forgot")}</Link>
        </p>
      </form>
    </Page>
  );
}

export function SignUp() {
  const { t } = useTranslation();
  const register = useMutation({
    mutationFn: (body: Schemas["Register"]) => ok(api.POST("/api/auth/register", { body })),
    onSuccess: (_data, body) => navigate(`/confirm?email=${encodeURIComponent(body.email)}`),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    register.mutate({
      display_name: formValue(form, "display_name"),
      email: formValue(form, "email"),
      password: formValue(form, "password"),
    });
  };
  return (
    <Page title={t("auth.sign_up")}>
      <form className="card narrow" onSubmit={submit}>
        <Field label={t("auth.display_name")}>
          <input name="display_name" autoComplete="name" required />
        </Field>
        <Field label={t("auth.email")}>
          <input name="email" type="email" autoComplete="email" required />
        </Field>
        <Field label={t("auth.password")} hint={t("auth.password_hint")}>
          <input name="password" type="password" autoComplete="new-password" required minLength={10} />
        </Field>
        <CaptchaNote />
        <ErrorNote error={register.error} />
        <button type="submit" className="primary" disabled={register.isPending}>
          {t("auth.sign_up")}
        </button>
        <p>
          <Link href="/sign-in">{t("auth.have_account")}</Link>
        </p>
      </form>
    </Page>
  );
}

/// The code from the email, with the password once more: a verified
/// address starts a session.
export function ConfirmEmail() {
  const { t } = useTranslation();
  const url = useLocation();
  const signedIn = useSignedIn();
  const [resent, setResent] = useState(false);
  const email = url.searchParams.get("email") ?? "";
  const verify = useMutation({
    mutationFn: (body: Schemas["VerifyEmail"]) => ok(api.POST("/api/auth/verify-email", { body })),
    onSuccess: signedIn,
  });
  const resend = useMutation({
    mutationFn: (address: string) => ok(api.POST("/api/auth/resend-code", { body: { email: address } })),
    onSuccess: () => setResent(true),
  });
  const submit = (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const form = e.currentTarget;
    verify.mutate({
      email: formValue(form, "email"),
      code: formValue(form, "code").trim(),
      password: formValue(form, "password"),
    });
  };
  return (
    <Page title={t("auth.confirm")}>
      <form className="card narrow" onSubmit={submit}>
        <p>{t("auth.code_sent")}</p>
        <Field label={t("auth.email")}>
          <input name="email" type="email" defaultValue={email} autoComplete="username" required />
        </Field>
        <Field label={t("auth.code")}>
          <input name="code" inputMode="numeric" autoComplete="one-time-code" pattern="[0-9 ]{6,7}" required />
        </Field>
        <Field label={t("auth.password")}>
          <input name="password" type="password" autoComplete="current-password" required />
        </Field>
        <ErrorNote error={verify.error ?? resend.error} />
        {resent && <p role="status">{t("auth.code_resent")}</p>}
        <button type="submit" className="primary" disabled={verify.isPending}>
          {t("auth.confirm")}
        </button>
        <button type="button" disabled={!email || resend.isPending} onClick={() => resend.mutate(email)}>
          {t("auth.resend")}
        </button>
      </form>
    </Page>
  );
}

export function ResetPassword() {
  const { t } = useTranslation();
  const [email, setEmail] = useState<string | null>(null);
  const request = useMutation({
    mutationFn: (address: string) => ok(api.POST("/api/auth/password-reset", { body: { email: address } })),
    onSuccess: (_data, address) => setEmail(address),
  });
  const confirm = useMutation({
    mutationFn: (body: Schemas["ConfirmReset"]) => ok(api.POST("/api/auth/password-reset/confirm", { body })),
    onSuccess: () => navigate("/sign-in?reset=1", true),
  });
  return (
    <Page title={t("auth.reset")}>
      {email === null ? (
        <form
          className="card narrow"
          onSubmit={(e) => {
            e.preventDefault();
            request.mutate(formValue(e.currentTarget, "email"));
          }}
        >
          <Field label={t("auth.email")}>
            <input name="email" type="email" autoComplete="username" required />
          </Field>
          <CaptchaNote />
          <ErrorNote error={request.error} />
          <button type="submit" className="primary" disabled={request.isPending}>
            {t("auth.send_code")}
          </button>
        </form>
      ) : (
        <form
          className="card narrow"
          onSubmit={(e) => {
            e.preventDefault();
            const form = e.currentTarget;
            confirm.mutate({
              email,
              code: formValue(form, "code").trim(),
              new_password: formValue(form, "new_password"),
            });
          }}
        >
          <p>{t("auth.reset_sent", { email })}</p>
          <Field label={t("auth.code")}>
            <input name="code" inputMode="numeric" autoComplete="one-time-code" required />
          </Field>
          <Field label={t("auth.new_password")} hint={t("auth.password_hint")}>
            <input name="new_password" type="password" autoComplete="new-password" required />
          </Field>
          <ErrorNote error={confirm.error} />
          <button type="submit" className="primary" disabled={confirm.isPending}>
            {t("auth.set_password")}
          </button>
        </form>
      )}
    </Page>
  );
}
