// A new API key's terms, as the account's key form and a device's approval
// both ask them: its scope and lifetime, and the password asked again
// before a key is made (an account without one is not asked).
import type { ReactNode } from "react";
import { useTranslation } from "react-i18next";
import type { Schemas } from "../api/client";
import type { User } from "../session";
import { Field, formNumber, formValue } from "../ui";

export function KeyTerms({ user, scope, children }: { user: User; scope: Schemas["KeyScope"]; children?: ReactNode }) {
  const { t } = useTranslation();
  return (
    <>
      <div className="row">
        {children}
        <Field label={t("keys.scope")}>
          <select name="scope" defaultValue={scope}>
            <option value="read">{t("keys.read")}</option>
            <option value="write">{t("keys.write")}</option>
          </select>
        </Field>
        <Field label={t("keys.days")}>
          <input name="days" type="number" min={1} max={365} defaultValue={90} />
        </Field>
      </div>
      {user.has_password && (
        <Field label={t("account.current_password")} hint={t("keys.password_hint")}>
          <input name="password" type="password" autoComplete="current-password" required />
        </Field>
      )}
    </>
  );
}

/// What a form holding [`KeyTerms`] says.
export function keyTermsOf(form: HTMLFormElement, user: User) {
  return {
    scope: formValue(form, "scope") as Schemas["KeyScope"],
    expires_in_days: formNumber(form, "days"),
    password: user.has_password ? formValue(form, "password") : null,
  };
}
