// autooptimize console: each page is rendered from the JSON API under /api/ (no other data source).
// Every number a chart shows is also printed in a table beside it, so it can be read and checked.
"use strict";

const page = document.body.dataset.page;
const arg = document.body.dataset.arg;

// URLs resolved against the origin: a page opened as http://user:pass@host/ must not hand fetch() a URL
// with credentials in it (the browser refuses those); the browser resends basic auth by itself.
function api(path) {
  return fetch(new URL(path, window.location.origin), {credentials: "same-origin", headers: {Accept: "application/json"}})
    .then(async (r) => {
      const body = parse(await r.text());
      if (!r.ok) throw new Error(`${r.status}: ${body.detail || r.statusText}`);
      return body;
    });
}

// Integers past 2^53 (snapshot ids, SSE) would lose digits as JS numbers: they are read as strings.
function parse(text) {
  try {
    return JSON.parse(text.replace(/([:,\[]\s*)(-?\d{16,})(?=\s*[,}\]])/g, '$1"$2"'));
  } catch (e) {
    return {};
  }
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n), i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}
const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const pct = (x) => (x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)}%`);
const secs = (s) => (s === null || s === undefined ? "–" : `${Number(s).toFixed(s < 10 ? 2 : 1)} s`);
const ratio = (x) => (x === null || x === undefined ? "–" : Number(x).toFixed(x < 10 ? 3 : 1));
const when = (iso) => (iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") : "–");
const badge = (text) => el("span", {class: `badge ${text}`}, text);
const tableLink = (t) => el("a", {href: `/tables/${encodeURIComponent(t)}`}, t);
const actionLink = (id, text) => el("a", {href: `/actions/${encodeURIComponent(id)}`}, text || id.slice(0, 8));

function card(label, value, testid) {
  return el("div", {class: "card"}, el("div", {class: "label"}, label),
            el("div", {class: "value", "data-testid": testid}, value));
}

// columns: [header, (row) => cell, {num: true, key: "testid-suffix"}]
function grid(columns, rows, testid, rowAttrs) {
  const head = el("tr", {}, columns.map(([h, , o]) => el("th", {class: o && o.num ? "num" : null}, h)));
  const body = rows.map((row, i) => el("tr", rowAttrs ? rowAttrs(row, i) : {},
    columns.map(([, f, o]) => el("td", {class: o && o.num ? "num" : null, "data-col": o && o.key}, f(row)))));
  return el("div", {class: "scroll"}, el("table", {"data-testid": testid}, el("thead", {}, head), el("tbody", {}, body)));
}

const COLORS = ["#98a2b3", "#2f5fd0", "#12805c", "#b54708"];

// A bar chart of file counts per size bucket, one dataset per series, and the same counts as a table.
function histogram(testid, labels, series, highlight) {
  const canvas = el("canvas", {"aria-label": `file sizes ${testid}`});
  const box = el("div", {class: "chart"}, canvas);
  const rows = series.map((s) => el("tr", {"data-series": s.name},
    el("th", {}, s.name), s.counts.map((c, i) => el("td", {class: "num", "data-bucket": i}, c)),
    el("td", {class: "num", "data-total": ""}, s.counts.reduce((a, b) => a + b, 0))));
  const numbers = el("table", {class: "hist-table", "data-testid": testid},
    el("thead", {}, el("tr", {}, el("th", {}, "files"), labels.map((l, i) => el("th", {class: "num"}, i === highlight ? `${l} ◆` : l)),
                      el("th", {class: "num"}, "total"))),
    el("tbody", {}, rows));
  const wrap = el("div", {}, box, el("div", {class: "scroll"}, numbers));
  requestAnimationFrame(() => {
    if (!window.Chart) return;
    new window.Chart(canvas, {
      type: "bar",
      data: {labels, datasets: series.map((s, i) => ({label: s.name, data: s.counts, backgroundColor: COLORS[(i + 1) % COLORS.length]}))},
      options: {animation: false, responsive: true, maintainAspectRatio: false,
                scales: {y: {beginAtZero: true, title: {display: true, text: "files"}},
                         x: {title: {display: true, text: "file size"}}}},
    });
  });
  return wrap;
}

function targetBucket(edges, target) {
  let b = 0;
  edges.forEach((e, i) => { if (e <= target) b = i; });
  return b;
}

function beforeAfter(ba, testid, target) {
  if (!ba) return el("p", {class: "muted"}, "No rewrite plan recorded (table hygiene, or not planned yet).");
  const parts = ba.partitions.length ? grid([
    ["partition", (p) => p.partition || "(unpartitioned)"],
    ["files", (p) => `${num(p.files_in)} → ${num(p.files_out)}`, {num: true}],
    ["RMSE before", (p) => bytes(Math.round(Math.sqrt(p.mse_before || 0))), {num: true}],
    ["RMSE after (planned)", (p) => bytes(Math.round(Math.sqrt(p.mse_after || 0))), {num: true}],
  ], ba.partitions, `${testid}-partitions`) : null;
  return el("div", {},
    histogram(testid, ba.labels, [{name: "before", counts: ba.before.counts}, {name: "after", counts: ba.after.counts}],
              target ? targetBucket(ba.edges, target) : -1),
    el("p", {class: "muted"}, `before: ${ba.before_source === "plan" ? "input sizes from the recorded plan" : "estimated from the plan's group bytes"}; `,
       `after: ${ba.after_source === "measured" ? "committed output sizes" : "the plan's estimate"}. ◆ marks the target's bucket.`),
    parts);
}

const ACTION_COLUMNS = [
  ["created", (a) => when(a.created_at)],
  ["table", (a) => (a.table ? tableLink(a.table) : "–")],
  ["partition", (a) => a.partition || "(table)"],
  ["kind", (a) => a.kind, {key: "kind"}],
  ["trigger", (a) => a.trigger, {key: "trigger"}],
  ["state", (a) => badge(a.state), {key: "state"}],
  ["reason", (a) => a.reason || "–"],
  ["files in → out", (a) => `${num(a.files_in)} → ${num(a.files_out)}`, {num: true, key: "files"}],
  ["bytes in → out", (a) => `${bytes(a.bytes_in)} → ${bytes(a.bytes_out)}`, {num: true, key: "bytes"}],
  ["rows in → out", (a) => `${num(a.rows_in)} → ${num(a.rows_out)}`, {num: true, key: "rows"}],
  ["plan / rewrite / commit", (a) => ["plan", "rewrite", "commit"].map((p) => secs(a.phases[p])).join(" / "), {num: true}],
  ["seconds", (a) => secs(a.seconds), {num: true, key: "seconds"}],
  ["snapshot", (a) => (a.snapshot_id === null ? "–" : String(a.snapshot_id)), {key: "snapshot"}],
  ["", (a) => el("span", {}, actionLink(a.id, "details"), " · ",
                  el("a", {href: `/actions/${encodeURIComponent(a.id)}#audit`}, "audit"), " · ",
                  a.table ? el("a", {href: explainHref(a.table, a.partition)}, "explain") : "")],
];

function explainHref(table, partition) {
  const q = partition ? `?partition=${encodeURIComponent(partition)}` : "";
  return `/explain/${encodeURIComponent(table)}${q}`;
}

async function tablesPage(main) {
  const tables = await api("/api/tables");
  main.replaceChildren(el("h1", {}, "Tables"));
  if (!tables.length) {
    main.append(el("p", {"data-testid": "no-tables"}, "No table is tracked yet. Track one with ",
                   el("code", {}, "autooptimize track NAMESPACE.TABLE"), "."));
    return;
  }
  main.append(grid([
    ["table", (t) => tableLink(t.table), {key: "table"}],
    ["health", (t) => badge(t.health), {key: "health"}],
    ["files", (t) => num(t.files), {num: true, key: "files"}],
    ["small files", (t) => `${num(t.small_files)} (${pct(t.small_file_share)})`, {num: true, key: "small"}],
    ["partitions over T²", (t) => `${num(t.partitions_needing_attention)} / ${num(t.partitions)}`, {num: true, key: "attention"}],
    ["worst MSE / T²", (t) => ratio(t.worst_ratio), {num: true, key: "ratio"}],
    ["worst partition", (t) => t.worst_partition || "–"],
    ["delete files", (t) => num(t.delete_files), {num: true, key: "deletes"}],
    ["failed decisions", (t) => num(t.decision_failures), {num: true, key: "failures"}],
    ["last action", (t) => (t.last_action ? el("span", {}, actionLink(t.last_action.id, t.last_action.kind), " ",
                                                badge(t.last_action.state), " ", when(t.last_action.at)) : "–")],
    ["", (t) => t.error || ""],
  ], tables, "tables", (t) => ({"data-table": t.table})));
}

// a tuning (PolicyTuning.as_dict()) in words
function tuningWords(t) {
  return (t.price ? `the priced rule at price ${t.price}, ` : "") +
    `fan-in ${t.fan_in}, cold after ${t.cold_after_seconds} s` +
    (t.cold_gap_factor ? ` (or ${t.cold_gap_factor} × a partition's recent gaps between writes)` : "") +
    `, leave alone below ${bytes(t.leave_alone_below)}` +
    (t.cold_absorb ? ", the cold finish absorbs its remainder" : "");
}

// which check a judgement of the tuning in force came from, when not the suggestion's own
function earlierCheck(s, since) {
  return since && !(s.check && s.check.since_ms === since)
    ? `, as the check of the commits since ${new Date(since).toISOString()} saw it` : "";
}

async function tablePage(main) {
  const t = await api(`/api/tables/${encodeURIComponent(arg)}`);
  const target = t.target_file_size;
  const hb = targetBucket(t.histogram.edges, target);
  main.replaceChildren(
    el("h1", {}, t.table),
    el("div", {class: "cards"},
       card("files", num(t.files), "files"), card("bytes", bytes(t.bytes), "bytes"),
       card("small files", num(t.small_files), "small-files"), card("delete files", num(t.delete_files), "delete-files"),
       card("partitions needing attention", `${num(t.partitions_needing_attention)} / ${num(t.partitions.length)}`, "attention"),
       card("target", bytes(target), "target"), card("tolerance T", bytes(t.tolerance), "tolerance"),
       card("failed decisions", num(t.decision_failures.count), "failures"),
       card("snapshot", t.snapshot_id === null ? "–" : String(t.snapshot_id), "snapshot")),
    el("p", {}, el("a", {href: explainHref(t.table, null)}, "explain this table"), " · ",
       el("a", {href: `/actions?table=${encodeURIComponent(t.table)}`}, "all its actions")));
  const partitionBox = el("div", {});
  const showPartition = (p) => {
    partitionBox.replaceChildren(el("h2", {}, `Partition ${p.partition || "(unpartitioned)"}`),
      histogram("hist-partition", t.histogram.labels, [{name: p.partition || "(unpartitioned)", counts: p.histogram.counts}], hb));
    main.querySelectorAll("tr[data-partition]").forEach((r) => r.classList.toggle("selected", r.dataset.partition === p.partition_key));
  };
  main.append(el("div", {class: "grid2"},
    el("div", {class: "panel"}, el("h2", {}, "File sizes, whole table"),
       histogram("hist-table", t.histogram.labels, [{name: "table", counts: t.histogram.counts}], hb)),
    el("div", {class: "panel"}, partitionBox)));
  main.append(el("h2", {}, "Partitions, worst MSE first"), grid([
    ["partition", (p) => p.partition || "(unpartitioned)", {key: "partition"}],
    ["files", (p) => num(p.n), {num: true, key: "files"}],
    ["small", (p) => num(p.small_files), {num: true, key: "small"}],
    ["bytes", (p) => bytes(p.bytes), {num: true}],
    ["rows", (p) => num(p.rows), {num: true}],
    ["RMSE", (p) => bytes(p.rmse_bytes), {num: true}],
    ["MSE / T²", (p) => ratio(p.mse_ratio), {num: true, key: "ratio"}],
    ["needs attention", (p) => (p.needs_attention ? badge("attention") : badge("healthy"))],
    ["delete files", (p) => num(p.delete_files), {num: true}],
    ["last action", (p) => (p.last_action ? el("span", {}, actionLink(p.last_action.id, p.last_action.kind), " ", badge(p.last_action.state)) : "–")],
  ], t.partitions, "partitions", (p) => ({"data-partition": p.partition_key, class: "clickable", onclick: () => showPartition(p)})));
  if (t.partitions.length) showPartition(t.partitions[0]);
  const b = t.budget;
  if (b && (b.core_seconds_per_hour !== null || b.decisions.length)) {
    const human = Object.fromEntries(t.partitions.map((p) => [p.partition_key, p.partition]));
    main.append(el("h2", {}, `Budget: ${b.core_seconds_per_hour === null ? "none" : `${num(b.core_seconds_per_hour)} core-s per hour`} (${b.mode})`),
      b.decisions.length ? grid([
        ["partition", (d) => human[d.partition_key] || d.partition_key || "(unpartitioned)"],
        ["kind", (d) => d.kind], ["value", (d) => d.value.toFixed(1), {num: true, key: "value"}],
        ["files removed", (d) => num(d.files_removed), {num: true}],
        ["cost (core-s)", (d) => d.cost_core_seconds.toFixed(2), {num: true, key: "cost"}],
        ["value / cost", (d) => (d.value_per_cost === null ? "–" : d.value_per_cost.toFixed(2)), {num: true}],
        ["verdict", (d) => badge(d.verdict), {key: "verdict"}], ["reason", (d) => d.reason || "–"],
        ["deferrals", (d) => num(d.deferrals), {num: true}],
        ["action", (d) => (d.action_id ? actionLink(d.action_id, d.kind) : "–")],
      ], b.decisions, "budget") : el("p", {class: "muted"}, "No candidate judged by the budget yet."));
  }
  const s = t.suggested_tuning;
  if (s) {
    const fig = (f) => `${f.mean_live_files.toFixed(1)} live files, WA ${f.write_amplification.toFixed(2)}`;
    const endLayout = (x) => `${num(x.end_files)} files, ${x.end_excess_mse_mib2.toFixed(1)} MiB²`;
    main.append(el("div", {class: "panel", "data-testid": "suggestion"},
      el("h2", {}, "Suggested tuning (AutoAnalyze)"),
      el("p", {}, tuningWords(s.tuning), ` · from ${num(s.commits)} commits · ${s.applied ? "applied" : "not applied"}`),
      el("p", {class: "muted"}, `predicted ${fig(s.predicted)}; current tuning ${fig(s.defaults)}; bin-pack ${fig(s.baseline)}`),
      s.latency_seconds === undefined ? null : el("p", {class: "muted", "data-testid": "suggestion-replay"},
        `replayed with merges landing ${s.latency_seconds.toFixed(2)} s after the write that prompted them (` +
        (s.latency_borrowed ? `median of the service's last ${num(s.latency_merges)} merges of other tables; too few of its own`
          : (s.latency_learned ?? s.latency_merges >= 10) ? `median of the table's last ${num(s.latency_merges)} merges` : "assumed: too few merges yet") +
        (s.size_pace && s.size_pace.seconds_per_mb ? `; ${(100 * s.size_pace.seconds_per_mb).toFixed(2)} s longer for each 100 MB ` +
          `a merge reads over ${s.size_pace.reference_mb.toFixed(1)} MB` : "") +
        `), merged bytes weighing ${s.output_ratio.toFixed(2)}× their inputs` +
        (s.file_overhead === undefined || s.file_overhead === null ? "" : ` less ${(s.file_overhead / 1024).toFixed(1)} KiB per file removed`) +
        (s.output_calibration ? ` (calibrated: ${num(s.output_calibration.groups)} groups and ${num(s.output_calibration.singles || 0)} ` +
          `single files of the table's rewritten by the ${s.output_calibration.engine} engine and removed` +
          (s.output_calibration.first_ratio && s.output_calibration.first_ratio !== 1 && s.file_overhead !== null
            ? `; a writer's file alone weighs ${s.output_calibration.first_ratio.toFixed(3)}× its bytes before that)` : ")")
          : (s.file_overhead === undefined || s.file_overhead === null ? "" : ` (fitted on ${num(s.output_commits)} ` +
            (s.output_borrowed ? "merges of the service's other tables)" : "REPLACE commits)"))) +
        (s.timer_lag_seconds === undefined ? "" : `, settled and cold partitions judged ${s.timer_lag_seconds.toFixed(2)} s ` +
          `after their moment (` + (s.timer_lag_learned ? `median of ${num(s.timer_lag_merges)} merges a timer prompted`
            : "the service's measured lag") + ")") +
        (s.clock_phases ? `; the mean of ${num(s.clock_phases)} replays on the listener's ${s.listener_pass_seconds} s passes at other phases` : "")),
      s.check ? el("p", {"data-testid": "suggestion-check"}, `since the last suggestion or tuning (${num(s.check.commits)} commits): ` +
        `predicted ${fig(s.check.predicted)}; realised ` +
        `${s.check.realised.mean_live_files === null ? "–" : s.check.realised.mean_live_files.toFixed(1)} live files, ` +
        `WA ${s.check.realised.write_amplification === null ? "–" : s.check.realised.write_amplification.toFixed(2)}` +
        (s.live_files_bias > 1 ? `; so this suggestion's file goal is judged on ${s.live_files_bias.toFixed(3)}× ` +
          `the live files its replay predicts` : "") +
        (s.check.end ? `; on the ${num(s.check.end.partitions)} partitions finished since: predicted ` +
          `${endLayout(s.check.end.predicted)}, realised ${endLayout(s.check.end.realised)}, bin-pack's replay ` +
          `${endLayout(s.check.end.baseline)}` : "")) : null,
      s.end_in_force === null || s.end_in_force === undefined ? null : el("p", {"data-testid": "suggestion-end"},
        `the tuning in force's end layout judged on what the table did (` +
        (s.end_in_force === 0 ? "held" : `missed by ${(100 * s.end_in_force).toFixed(0)} %`) +
        earlierCheck(s, s.end_checked_since_ms) +
        "), not on its replay"),
      s.live_in_force === null || s.live_in_force === undefined ? null : el("p", {"data-testid": "suggestion-live"},
        `the tuning in force's live files judged on what the table kept: ${s.live_in_force.toFixed(3)}× its replay's` +
        earlierCheck(s, s.live_checked_since_ms)),
      s.passed_over ? el("p", {"data-testid": "suggestion-kept"},
        `the tuning in force is kept over ${tuningWords(s.passed_over.tuning)}: it would rewrite ` +
        `${(100 * s.passed_over.saving).toFixed(2)} % fewer bytes, ` +
        (s.passed_over.reason === "saving" ? `under the ${(100 * s.passed_over.switch_saving).toFixed(0)} % a change needs`
          : `but fewer on only ${num(s.passed_over.phases_fewer)} of the clock's ${num(s.passed_over.phases)} phases`)) : null));
  }
  main.append(el("h2", {}, "Latest actions: before and after"));
  const withPlans = t.actions.filter((a) => a.before_after);
  if (!withPlans.length) main.append(el("p", {class: "muted"}, "No action with a rewrite plan yet."));
  main.append(el("div", {class: "grid2"}, withPlans.slice(0, 6).map((a) => el("div", {class: "panel", "data-action": a.id},
    el("div", {}, actionLink(a.id), " ", a.kind, " ", badge(a.state), " ", a.partition || "(all partitions)", " · ",
       `files ${num(a.files_in)} → ${num(a.files_out)}`),
    beforeAfter(a.before_after, `ba-${a.id}`, target)))));
}

async function actionsPage(main) {
  const params = new URLSearchParams(window.location.search);
  const limit = Number(params.get("limit") || 50), offset = Number(params.get("offset") || 0);
  params.set("limit", limit); params.set("offset", offset);
  const data = await api(`/api/actions?${params}`);
  const select = (name) => el("label", {}, name, el("select", {name},
    el("option", {value: ""}, "any"), (data.choices[name] || []).map((v) => el("option", {value: v, selected: params.get(name) === v}, v))));
  const form = el("form", {class: "filters", method: "get", action: "/actions"},
    el("label", {}, "table", el("input", {name: "table", value: params.get("table") || "", placeholder: "namespace.table"})),
    select("kind"), select("state"), select("trigger"), el("button", {type: "submit"}, "Filter"));
  const pager = el("div", {class: "pager"},
    el("span", {"data-testid": "actions-total"}, `${num(data.total)} actions`),
    offset > 0 ? el("a", {href: `?${withParam(params, "offset", Math.max(0, offset - limit))}`}, "← newer") : null,
    offset + limit < data.total ? el("a", {href: `?${withParam(params, "offset", offset + limit)}`}, "older →") : null);
  main.replaceChildren(el("h1", {}, "Actions"), form, grid(ACTION_COLUMNS, data.actions, "actions", (a) => ({"data-action": a.id})), pager);
}

function withParam(params, key, value) {
  const p = new URLSearchParams(params);
  p.set(key, value);
  return p.toString();
}

async function actionPage(main) {
  const a = await api(`/api/actions/${encodeURIComponent(arg)}`);
  const phases = Object.entries(a.phases);
  main.replaceChildren(...[
    el("h1", {}, `${a.kind} `, badge(a.state), " ", el("span", {class: "muted"}, a.id)),
    el("div", {class: "cards"},
       card("table", a.table ? tableLink(a.table) : "–", "table"), card("partition", a.partition || "(table)", "partition"),
       card("trigger", a.trigger, "trigger"), card("reason", a.reason || "–", "reason"),
       card("files in → out", `${num(a.files_in)} → ${num(a.files_out)}`, "files"),
       card("bytes in → out", `${bytes(a.bytes_in)} → ${bytes(a.bytes_out)}`, "bytes"),
       card("rows in → out", `${num(a.rows_in)} → ${num(a.rows_out)}`, "rows"),
       card("seconds", secs(a.seconds), "seconds"), card("commit conflicts", num(a.commit_conflicts), "conflicts"),
       card("attempts", num(a.attempts), "attempts"),
       card("snapshot", a.snapshot_id === null ? "–" : String(a.snapshot_id), "snapshot")),
    a.error ? el("div", {class: "panel"}, el("h2", {}, "Error"), el("pre", {}, a.error)) : null,
    el("p", {}, a.table ? el("a", {href: explainHref(a.table, a.partition)}, "explain this partition now") : null),
    el("div", {class: "grid2"},
       el("div", {class: "panel"}, el("h2", {}, "Before and after"), beforeAfter(a.before_after, "ba", a.target_file_size)),
       el("div", {class: "panel"}, el("h2", {}, "Phases"), phases.length ? grid([
         ["phase", ([k]) => k], ["seconds", ([, v]) => secs(v), {num: true}]], phases, "phases") : el("p", {class: "muted"}, "none recorded"))),
    el("h2", {id: "audit"}, "Audit trail"),
    grid([["#", (e) => e.id, {num: true}], ["at", (e) => when(e.at)], ["event", (e) => e.event, {key: "event"}],
          ["detail", (e) => el("pre", {}, JSON.stringify(e.detail))]], a.audit, "audit")].filter((c) => c));
  if (window.location.hash === "#audit") document.getElementById("audit").scrollIntoView();
}

async function explainPage(main) {
  const partition = new URLSearchParams(window.location.search).get("partition");
  const q = partition ? `?partition=${encodeURIComponent(partition)}` : "";
  const e = await api(`/api/tables/${encodeURIComponent(arg)}/explain${q}`);
  main.replaceChildren(el("h1", {}, `Explain ${e.table}`),
    el("p", {class: "muted"}, `At snapshot ${e.snapshot_id}, target ${bytes(e.target_file_size)}; planned on raw file sizes, nothing changed.`),
    grid([
      ["partition", (p) => p.partition || "(unpartitioned)", {key: "partition"}], ["action", (p) => p.action, {key: "action"}],
      ["reason", (p) => p.reason],
      ["rule", (p) => p.rule || "–"], ["files", (p) => `${num(p.files_replaced)} → ${num(p.files_out)}`, {num: true}],
      ["bytes rewritten", (p) => bytes(p.bytes_rewritten), {num: true}],
      ["RMSE", (p) => `${bytes(Math.round(Math.sqrt(p.mse_before)))} → ${bytes(Math.round(Math.sqrt(p.mse_after)))}`, {num: true}],
      ["value", (p) => (p.budget && p.budget.value !== undefined ? p.budget.value.toFixed(1) : "–"), {num: true, key: "value"}],
      ["cost (core-s)", (p) => (p.budget && p.budget.cost_core_seconds !== undefined ? p.budget.cost_core_seconds.toFixed(2) : "–"), {num: true, key: "cost"}],
      ["budget", (p) => (p.budget ? p.budget.verdict : "–"), {key: "verdict"}],
    ], e.partitions, "explain"));
}

// Shares per tenant over the window beside each tenant's target (weight over the active tenants' weights).
function tenantsSection(t) {
  if (t.error) return [el("h2", {}, "Tenants"), el("p", {class: "muted", "data-testid": "tenants-error"}, t.error)];
  const urgent = t.urgent_classes.length ? `urgent first: ${t.urgent_classes.join(", ")}` : "no urgent class";
  return [el("h2", {}, `Tenants (last ${t.window_minutes} min, ${t.fairness}, ${urgent})`),
    grid([["tenant", (r) => r.tenant, {key: "tenant"}], ["weight", (r) => num(r.weight), {num: true}],
          ["target", (r) => pct(r.target_share), {num: true, key: "target"}],
          ["dispatched", (r) => num(r.dispatched), {num: true, key: "dispatched"}],
          ["share", (r) => pct(r.dispatch_share), {num: true, key: "share"}],
          ["busy", (r) => secs(r.busy_seconds), {num: true}], ["busy share", (r) => pct(r.busy_share), {num: true}],
          ["queued", (r) => num(r.queued), {num: true}], ["in flight", (r) => num(r.in_flight), {num: true}],
          ["cap", (r) => (r.max_concurrent === null ? "–" : num(r.max_concurrent)), {num: true}],
          ["since ever", (r) => num(r.dispatched_total), {num: true}]], t.tenants, "tenants")];
}

async function queuesPage(main) {
  const [q, t] = await Promise.all([api("/api/queues"),
    api("/api/tenants").catch((err) => ({error: `tenant shares unavailable: ${err.message || err}`}))]);
  const rows = [];
  for (const [cls, entry] of Object.entries(q.classes)) {
    const tables = Object.entries(entry.tables);
    if (!tables.length) rows.push({cls, table: "–", queued: entry.queued});
    for (const [table, n] of tables) rows.push({cls, table, queued: n});
  }
  const canvas = el("canvas", {"aria-label": "backlog trend"});
  main.replaceChildren(el("h1", {}, "Queues"),
    el("div", {class: "cards"}, card("dispatch", q.dispatch, "dispatch"), card("slots", num(q.slots), "slots"),
       card("in flight", num(q.in_flight), "in-flight"), card("queued", num(q.queued), "queued")),
    el("div", {class: "panel", "data-testid": "recommendation"}, el("h2", {}, "Actors"),
       q.recommendation || (q.growing ? "The backlog is growing, but not every slot is busy." : "No need to add actors: the backlog is not growing with every slot busy.")),
    el("h2", {}, "Backlog per priority class and table"),
    grid([["class", (r) => r.cls, {key: "class"}], ["table", (r) => r.table, {key: "table"}], ["queued", (r) => num(r.queued), {num: true, key: "queued"}]],
         rows, "queues"),
    ...tenantsSection(t),
    el("h2", {}, "Trend"), el("div", {class: "panel"}, el("div", {class: "chart"}, canvas)));
  requestAnimationFrame(() => {
    if (!window.Chart) return;
    new window.Chart(canvas, {type: "line",
      data: {labels: q.trend.map((s) => new Date(s.at * 1000).toLocaleTimeString()),
             datasets: [{label: "queued", data: q.trend.map((s) => s.queued), borderColor: COLORS[1]}]},
      options: {animation: false, responsive: true, maintainAspectRatio: false, scales: {y: {beginAtZero: true}}}});
  });
}

const PAGES = {tables: tablesPage, table: tablePage, actions: actionsPage, action: actionPage, explain: explainPage, queues: queuesPage};

document.querySelectorAll("header nav a[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav.split(" ").includes(page)));
const main = document.getElementById("main");
PAGES[page](main).then(() => {
  document.body.dataset.ready = "true";
}).catch((err) => {
  const box = document.getElementById("error");
  box.textContent = String(err.message || err);
  box.hidden = false;
  main.replaceChildren();
  document.body.dataset.ready = "error";
});
