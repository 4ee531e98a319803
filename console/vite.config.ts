import { defineConfig } from "vite";

// Served by the local stack at /console/ (remote_batch_local/console.py), by CloudFront when deployed.
export default defineConfig({
  base: "/console/",
  // build/console: where `make deploy-console` (infra/console_upload.py) uploads from.
  build: { outDir: "../build/console", emptyOutDir: true, sourcemap: false },
  test: { environment: "jsdom", include: ["test/**/*.test.ts"] },
});
