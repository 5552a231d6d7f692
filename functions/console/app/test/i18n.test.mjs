// Every string the console shows goes through i18next: both catalogs hold
// the same keys with the same placeholders, and every key the source names
// (literally, or by a prefix it completes at run time) is in them.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

const root = new URL("../src/", import.meta.url).pathname;
const read = (path) => JSON.parse(readFileSync(join(root, path), "utf8"));
// A language's catalogs: the shared one and each page's beside it.
const catalogs = (language) => [
  [`locales/${language}.json`, read(`locales/${language}.json`)],
  ...readdirSync(join(root, "pages"))
    .filter((name) => name.endsWith(`.${language}.json`))
    .map((name) => [`pages/${name}`, read(`pages/${name}`)]),
];
const merged = (language) => Object.assign({}, ...catalogs(language).map(([, catalog]) => catalog));
const en = merged("en");
const zh = merged("zh-CN");

/** The text of every file below `dir` whose name `wanted` accepts. */
function sources(dir, wanted) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === "target" || name === "node_modules" ? [] : sources(path, wanted);
    return wanted(name) ? [readFileSync(path, "utf8")] : [];
  });
}
const code = sources(root, (name) => /\.(ts|tsx)$/.test(name) && !name.endsWith(".d.ts")).join("\n");
const placeholders = (text) => [...text.matchAll(/\{\{(\w+)\}\}/g)].map((m) => m[1]).sort();
// A key used with { count } is looked up as key_one / key_other.
const has = (catalog, key) => key in catalog || `${key}_other` in catalog;

test("both catalogs hold the same keys", () => {
  assert.deepEqual(
    Object.keys(zh).filter((k) => !(k in en)),
    [],
    "keys in zh-CN that en lacks",
  );
  assert.deepEqual(
    Object.keys(en).filter((k) => !(k in zh)),
    [],
    "keys in en that zh-CN lacks",
  );
});

test("each catalog has its twin, and no key is written in two catalogs", () => {
  for (const language of ["en", "zh-CN"]) {
    const seen = new Map();
    for (const [path, catalog] of catalogs(language)) {
      for (const key of Object.keys(catalog)) {
        assert.ok(!seen.has(key), `${key} is in both ${seen.get(key)} and ${path}`);
        seen.set(key, path);
      }
    }
  }
  const pages = (language) => catalogs(language).slice(1).map(([path]) => path.replace(`.${language}.json`, ""));
  assert.deepEqual(pages("zh-CN"), pages("en"));
});

test("every translation is written and keeps its placeholders", () => {
  for (const [key, text] of Object.entries(en)) {
    assert.equal(typeof text, "string", key);
    assert.equal(typeof zh[key], "string", key);
    if (!key.startsWith("plan_source.unlimited")) {
      assert.ok(text.trim() !== "", `en ${key} is empty`);
      assert.ok(zh[key].trim() !== "", `zh-CN ${key} is empty`);
    }
    assert.deepEqual(placeholders(zh[key]), placeholders(text), `placeholders of ${key}`);
  }
});

test("every key the source names is in both catalogs", () => {
  const literal = [...code.matchAll(/\bt\(\s*"([^"]+)"/g)].map((m) => m[1]);
  assert.ok(literal.length > 300, `found only ${literal.length} keys: is the pattern still right?`);
  const missing = literal.filter((key) => !has(en, key) || !has(zh, key));
  assert.deepEqual([...new Set(missing)], []);
});

test("every key prefix completed at run time has keys", () => {
  const prefixes = [...code.matchAll(/\bt\(\s*`([^`$]+)\$\{/g)].map((m) => m[1]);
  assert.ok(prefixes.length > 10);
  for (const prefix of new Set(prefixes)) {
    assert.ok(
      Object.keys(en).some((k) => k.startsWith(prefix)),
      `no key starts with ${prefix}`,
    );
  }
});

test("the status words of the API's enums are all translated", () => {
  const openapi = JSON.parse(readFileSync(new URL("../../../../docs/openapi.json", import.meta.url), "utf8"));
  const schemas = openapi.components.schemas;
  for (const name of ["ClusterStatus", "ConnectionStatus", "NodeStatus", "JoinStepStatus", "JoinOutcome", "JoinTokenStatus", "IngressStatus", "DnsManagementStatus", "TlsStatus", "JobStatus", "UserStatus", "Phase"]) {
    for (const value of schemas[name].enum) {
      assert.ok(`status.${value}` in en, `status.${value} (${name})`);
    }
  }
  for (const value of schemas.NodeEventType.enum) assert.ok(`node_event.${value}` in en, value);
  for (const value of schemas.PublicAccessMode.enum) assert.ok(`access.${value}` in en, value);
  for (const value of schemas.TlsMode.enum) assert.ok(`tls_mode.${value}` in en, value);
  for (const value of schemas.DnsManagementScope.enum) assert.ok(`dns_scope.${value}` in en, value);
  for (const value of schemas.PlanSource.enum) assert.ok(`plan_source.${value}` in en, value);
  for (const value of schemas.UserRole.enum) assert.ok(`role.${value}` in en, value);
});

test("every stage a job records has its words in both catalogs", () => {
  // The OpenAPI document's JobStage enum: every stage the backbone and the
  // job handlers declare (shared::jobs::stage).
  const openapi = JSON.parse(readFileSync(new URL("../../../../docs/openapi.json", import.meta.url), "utf8"));
  const stages = openapi.components.schemas.JobStage.enum;
  assert.ok(stages.length > 20, `only ${stages.length} stages in the document`);
  assert.deepEqual(stages.filter((stage) => !(`stage.${stage}` in en) || !(`stage.${stage}` in zh)), []);
});

test("every problem code the API documents has a title and a message in both catalogs", () => {
  // The OpenAPI document's ProblemCode enum: every code a function or a
  // capability declares it answers (shared::openapi::answering).
  const openapi = JSON.parse(readFileSync(new URL("../../../../docs/openapi.json", import.meta.url), "utf8"));
  const codes = openapi.components.schemas.ProblemCode.enum;
  assert.ok(codes.length > 80, `only ${codes.length} codes in the document`);
  const missing = codes.flatMap((code) =>
    [`problem.${code}.title`, `problem.${code}.message`].filter((key) => !(key in en) || !(key in zh)),
  );
  assert.deepEqual(missing, []);
  // And no catalog entry for a code the API no longer answers.
  const stale = Object.keys(en)
    .filter((key) => key.startsWith("problem."))
    .map((key) => key.split(".")[1])
    .filter((code) => !codes.includes(code));
  assert.deepEqual([...new Set(stale)], []);
});

test("every join finding, join reason, job failure and field refusal the API documents has its words in both catalogs", () => {
  // The OpenAPI document's enums: what a join script reports it found
  // (JoinDetailCode), why an attempt ended (JoinReasonCode), why a job
  // failed (FailureCode). The console words each; a sentence for a code the
  // document no longer has is stale.
  const schemas = JSON.parse(readFileSync(new URL("../../../../docs/openapi.json", import.meta.url), "utf8")).components.schemas;
  const families = [
    ["JoinDetailCode", (code) => [`join.detail.${code}`], "join.detail."],
    ["JoinReasonCode", (code) => [`join.reason.${code}`], "join.reason."],
    ["FailureCode", (code) => [`failure.${code}.title`, `failure.${code}.hint`], "failure."],
    ["FieldErrorCode", (code) => [`field_error.${code}`], "field_error."],
  ];
  for (const [schema, keysOf, prefix] of families) {
    const codes = schemas[schema].enum;
    assert.ok(codes.length >= 3, `only ${codes.length} codes in ${schema}`);
    const missing = codes.flatMap(keysOf).filter((key) => !(key in en) || !(key in zh));
    assert.deepEqual(missing, [], schema);
    const stale = Object.keys(en)
      .filter((key) => key.startsWith(prefix))
      .filter((key) => !codes.some((code) => keysOf(code).includes(key)));
    assert.deepEqual(stale, [], schema);
  }
});

// The Kubernetes words, as the Kubernetes Chinese documentation writes them
// (docs/console.md, "Languages"): a Chinese string whose English twin names
// one of them uses that word, or keeps the English one (an API kind such
// as `Node`).
const GLOSSARY = [
  [/\bclusters?\b/i, "集群", "Cluster"],
  [/\bnodes?\b/i, "节点", "Node"],
  [/\bnamespaces?\b/i, "命名空间", "namespace"],
  [/\bcontrol plane\b/i, "控制平面", "control plane"],
  [/\bdrain(s|ed|ing)?\b/i, "清空", "drain"],
  [/\bevict(s|ed|ing|ion)?\b/i, "驱逐", "evict"],
  [/\bcordon(s|ed|ing)?\b/i, "封锁", "cordon"],
];

test("Kubernetes words are the Kubernetes Chinese documentation's", () => {
  const wrong = [];
  for (const [key, text] of Object.entries(en)) {
    for (const [english, chinese, kept] of GLOSSARY) {
      if (english.test(text) && !zh[key].includes(chinese) && !zh[key].toLowerCase().includes(kept.toLowerCase())) {
        wrong.push(`${key}: "${zh[key]}" lacks ${chinese}`);
      }
    }
  }
  assert.deepEqual(wrong, []);
  // And never the words the documentation does not use for them.
  for (const [key, text] of Object.entries(zh)) {
    assert.ok(!/腾空|排空/.test(text), `${key}: "${text}" says drain as 清空`);
  }
});
