// The console's lint (scripts/console.sh check): typescript-eslint's
// recommended rules and React's rules of hooks, every warning an error.
import js from "@eslint/js";
import reactHooks from "eslint-plugin-react-hooks";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["node_modules", "src/api/schema.d.ts"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["src/**/*.{ts,tsx}"],
    plugins: { "react-hooks": reactHooks },
    rules: {
      "react-hooks/rules-of-hooks": "error",
      "react-hooks/exhaustive-deps": "error",
      // A page adds its catalog's keys by `interface PageCatalogs extends …Catalog {}`.
      "@typescript-eslint/no-empty-object-type": ["error", { allowInterfaces: "with-single-extends" }],
    },
  },
  {
    files: ["e2e/**/*.mjs", "test/**/*.mjs", "scripts/**/*.mjs", "vite.config.ts", "playwright.config.js"],
    // Node's globals, and the browser's in the functions the journeys run in the page.
    languageOptions: {
      globals: Object.fromEntries(
        ["process", "console", "URL", "setTimeout", "Buffer", "performance", "fetch", "window", "document", "navigator"].map((name) => [
          name,
          "readonly",
        ]),
      ),
    },
  },
);
