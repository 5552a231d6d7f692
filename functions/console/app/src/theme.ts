// Light or dark: the system's setting (`prefers-color-scheme`, followed as
// it changes) unless the reader chose one in the header, kept in this
// browser. The stylesheet reads `data-theme` on the root element.
export const THEMES = ["system", "light", "dark"] as const;
export type Theme = (typeof THEMES)[number];

const KEY = "kubebyon.theme";
const systemDark = matchMedia("(prefers-color-scheme: dark)");

export function storedTheme(): Theme {
  const value = localStorage.getItem(KEY);
  return THEMES.find((t) => t === value) ?? "system";
}

function show(theme: Theme) {
  document.documentElement.dataset.theme = theme === "system" ? (systemDark.matches ? "dark" : "light") : theme;
}

/// Shows `theme` and remembers it.
export function applyTheme(theme: Theme) {
  if (theme === "system") localStorage.removeItem(KEY);
  else localStorage.setItem(KEY, theme);
  show(theme);
}

systemDark.addEventListener("change", () => show(storedTheme()));
