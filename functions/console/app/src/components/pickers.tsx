// The back office's pickers: a person by email, a cluster by name, each a
// search box whose suggestions come from the API; the id the filter needs
// is taken from the one chosen, never typed.
import { useEffect, useId, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { useTranslation } from "react-i18next";
import { api, ok } from "../api/client";
import { keys } from "../queryKeys";
import { Field } from "../ui";

type Choice = { id: string; text: string };

/// A search box over `choices` (read for what is typed, 2 characters on):
/// `onPick` gets the id of the one whose text is typed whole, or "" when
/// none is.
function Picker({
  label,
  hint,
  choices,
  text,
  setText,
  onPick,
}: {
  label: string;
  hint: string;
  choices: Choice[];
  text: string;
  setText: (text: string) => void;
  onPick: (id: string) => void;
}) {
  const list = useId();
  const picked = choices.find((c) => c.text === text.trim())?.id ?? "";
  useEffect(() => onPick(picked), [picked, onPick]);
  return (
    <>
      <Field label={label} hint={hint}>
        <input type="search" list={list} value={text} onChange={(e) => setText(e.target.value)} spellCheck={false} autoComplete="off" />
      </Field>
      <datalist id={list}>
        {choices.map((c) => (
          <option key={c.id} value={c.text} />
        ))}
      </datalist>
    </>
  );
}

/// A user, by email.
export function UserPicker({ label, onPick }: { label: string; onPick: (id: string) => void }) {
  const { t } = useTranslation();
  const [text, setText] = useState("");
  const q = text.trim();
  const users = useQuery({
    queryKey: keys.admin.users({ q, picker: true }),
    queryFn: () => ok(api.GET("/api/console/admin/users", { params: { query: { q, limit: 20 } } })),
    enabled: q.length >= 2,
  });
  const choices = (users.data ?? []).map((u) => ({ id: u.id, text: u.email }));
  return <Picker label={label} hint={t("admin.pick_user")} choices={choices} text={text} setText={setText} onPick={onPick} />;
}

/// A cluster of any organization, by name (with its owner's email, as
/// names repeat across organizations).
export function ClusterPicker({ label, onPick }: { label: string; onPick: (id: string) => void }) {
  const { t } = useTranslation();
  const [text, setText] = useState("");
  const q = text.trim().split(" ")[0] ?? "";
  const valid = /^[A-Za-z0-9-]{1,63}$/.test(q);
  const clusters = useQuery({
    queryKey: keys.admin.clusters({ q, picker: true }),
    queryFn: () => ok(api.GET("/api/console/admin/clusters", { params: { query: { q, limit: 20 } } })),
    enabled: valid,
  });
  const choices = (clusters.data?.items ?? []).map((c) => ({
    id: c.id,
    text: `${c.name} (${c.owner_email ?? c.id})`,
  }));
  return <Picker label={label} hint={t("admin.pick_cluster")} choices={choices} text={text} setText={setText} onPick={onPick} />;
}
