import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// The console is served by the `console` function (and by `local` at `/`),
// beside the API under `/api`. `npm run dev` proxies the API to a running
// `local` (./infra/local/run.sh), so both share one origin as in production.
export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "../dist",
    emptyOutDir: true,
    assetsDir: "assets",
    // No inline scripts or data: modules: the Content-Security-Policy allows
    // scripts from the console's own origin only.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
  },
  server: {
    proxy: {
      "/api": process.env.KUBEBYON_API ?? "http://127.0.0.1:8080",
      "/join": process.env.KUBEBYON_API ?? "http://127.0.0.1:8080",
    },
  },
});
