// Decodes a gzipped pprof profile with npm's pprof-format (an independent decoder, for
// preload-tests/tests/push.rs) and prints JSON: the sample types, for each function name the
// sum of each sample type's values over the samples whose stack passes through it (pprof's
// "cum"), the labels seen and the period. PPROF_FORMAT_MODULES is the node_modules directory
// holding pprof-format (scripts/test.sh installs it in target/npm-pprof).
//
//   node pprof_format_decode.js PROFILE.pb.gz
'use strict';
const fs = require('fs');
const zlib = require('zlib');
const path = require('path');
const modules = process.env.PPROF_FORMAT_MODULES;
const { Profile } = require(path.join(modules, 'pprof-format'));
const raw = zlib.gunzipSync(fs.readFileSync(process.argv[2]));
const p = Profile.decode(raw);
const str = (i) => p.stringTable.strings[Number(i)];
const types = p.sampleType.map((t) => [str(t.type), str(t.unit)]);
const fnName = new Map(p.function.map((f) => [Number(f.id), str(f.name)]));
const locFns = new Map(p.location.map((l) => [Number(l.id), l.line.map((ln) => fnName.get(Number(ln.functionId)))]));
const cum = {};
const labels = {};
for (const s of p.sample) {
  const names = new Set();
  for (const id of s.locationId) for (const n of locFns.get(Number(id)) || []) names.add(n);
  for (const n of names) {
    cum[n] = cum[n] || types.map(() => 0);
    s.value.forEach((v, i) => { cum[n][i] += Number(v); });
  }
  for (const l of s.label) {
    const k = str(l.key);
    labels[k] = labels[k] || [];
    const v = str(l.str);
    if (!labels[k].includes(v)) labels[k].push(v);
  }
}
console.log(JSON.stringify({ types, cum, labels, period: Number(p.period) }));
