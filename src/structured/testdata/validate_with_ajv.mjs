// Validates generated documents against their JSON schemas with ajv (an implementation
// independent of deepinfer). Input: argv[2] = JSON file {schemas: [...], docs: [{schema, text}]}.
// Output (stdout): one line per doc, "ok" or "bad <index> <errors>".
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(process.env.DEEPINFER_NODE_MODULES + "/");
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats");
const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const validators = input.schemas.map((s) => ajv.compile(s));
for (const [i, d] of input.docs.entries()) {
  let value;
  try {
    value = JSON.parse(d.text);
  } catch (e) {
    console.log(`bad ${i} not JSON: ${e.message}`);
    continue;
  }
  const v = validators[d.schema];
  if (v(value)) console.log("ok");
  else console.log(`bad ${i} ${JSON.stringify(v.errors)}`);
}
