import { defineConfig } from "vite";

// Served by the local stack at /console/ (remote_batch_local/console.py), by CloudFront when deployed.
export default defineConfig({
  base: "/console/",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
  test: { environment: "jsdom", include: ["test/**/*.test.ts"] },
});
