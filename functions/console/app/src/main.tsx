import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { MutationCache, QueryCache, QueryClient, QueryClientProvider } from "@tanstack/react-query";
import "./i18n";
import "./styles.css";
import { ApiError } from "./api/client";
import { App, isPublic } from "./App";
import { navigate } from "./router";
import { applyTheme, storedTheme } from "./theme";

applyTheme(storedTheme());

/// Forgets the session and sends the reader to sign in, to come back here.
function signInAgain(client: QueryClient) {
  client.setQueryData(["me"], null);
  if (isPublic(location.pathname)) return;
  const back = location.pathname + location.search;
  navigate(`/sign-in?return=${encodeURIComponent(back)}`, true);
}

// A 401 anywhere means the session ended: back to sign-in, then back here.
function onError(error: unknown) {
  if (error instanceof ApiError && error.status === 401) signInAgain(queryClient);
}

const queryClient = new QueryClient({
  queryCache: new QueryCache({ onError }),
  mutationCache: new MutationCache({ onError }),
  defaultOptions: {
    queries: {
      retry: (count, error) => !(error instanceof ApiError && error.status > 0 && error.status < 500) && count < 2,
      staleTime: 5_000,
    },
  },
});

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <QueryClientProvider client={queryClient}>
      <App />
    </QueryClientProvider>
  </StrictMode>,
);
