// What every script shares: the gateway's address and key from the environment, and one JSON
// document on stdout for the Python test to check (tests/test_node_sdks_live.py).
export const BASE_URL = process.env.GATEWAY_URL;
export const API_KEY = process.env.GATEWAY_KEY;
export const MODEL = process.env.GATEWAY_MODEL;
export const MARKER = process.env.GATEWAY_MARKER ?? "";

if (!BASE_URL || !API_KEY) {
  console.error("set GATEWAY_URL and GATEWAY_KEY");
  process.exit(2);
}

export function report(document) {
  process.stdout.write(JSON.stringify(document) + "\n");
}

// Run main(); an SDK error becomes one JSON line on stderr and exit status 1.
export function run(main) {
  main().catch((error) => {
    console.error(JSON.stringify({ error: String(error), status: error?.status ?? null, body: error?.error ?? null }));
    process.exit(1);
  });
}
