// Validates ServiceMonitors against the prometheus-operator's API types (monitoring.coreos.com/v1,
// the schemas @kubernetes-models/prometheus-operator generates from the operator's Go types).
// Usage: node servicemonitor_check.mjs MODELS_DIR < docs.json  (a JSON array of documents).
// Prints one line per document ("ok NAME" or "invalid NAME: why"); exits 1 if any is invalid.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const models = join(process.argv[2], "node_modules", "@kubernetes-models", "prometheus-operator");
const { ServiceMonitor } = await import(
  pathToFileURL(join(models, "monitoring.coreos.com", "v1", "ServiceMonitor.mjs")).href
);
let invalid = 0;
for (const doc of JSON.parse(readFileSync(0, "utf8"))) {
  const name = doc?.metadata?.name;
  try {
    new ServiceMonitor(doc).validate();
    console.log(`ok ${name}`);
  } catch (e) {
    invalid += 1;
    console.log(`invalid ${name}: ${e.message}`);
  }
}
process.exit(invalid ? 1 : 0);
