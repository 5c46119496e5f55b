"""``swerl view --out FILE.html``: one self-contained page with every episode of a run (all
dumped steps) or of an eval folder, to filter, sort and read, as ``harbor view`` does.

Stage: after the trainer; reads episodes through :mod:`swerl.report.view`, writes one file.
The episodes travel as JSON inside the page; a small script draws the list and one episode at
a time. The filter and sort live in the URL fragment (``#outcome=passed&sort=reward&desc=1``),
so a view can be bookmarked, shared, or opened by a script (the tests drive headless Chromium
this way). Fragment keys: ``step``, ``task`` (substring), ``outcome``, ``reward_min``,
``reward_max``, ``adv`` (``pos``, ``neg``, ``zero``), ``len_min``, ``len_max`` (generated
tokens), ``flag`` (``tamper``, ``cut``, ``masked``), ``sort`` (a column key), ``desc`` (1),
``ep`` (the episode shown).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from swerl import metric_keys
from swerl.fileio import atomic_write_text
from swerl.report.runs import read_config
from swerl.report.turns import turns_json
from swerl.report.view import Episode, EpisodeSet, describe, verifier_reason

TAIL_LINES = 60
"""Lines of the verifier's output kept per episode (its tail: where pytest's summary is)."""


def _protocol(eps: EpisodeSet) -> str | None:
    """The run's ``agent.protocol`` (config.yaml of a run; summary.json of an eval), or None."""
    config = read_config(eps.source) if eps.kind == "train" else eps.summary
    agent = config.get("agent") if isinstance(config.get("agent"), dict) else {}
    return agent.get("protocol") or config.get("protocol")


def episode_row(i: int, ep: Episode, protocol: str | None) -> dict[str, Any]:
    """What the page knows of one episode: the list's columns, flags and the detail view."""
    tail = "\n".join(ep.verifier_tail.splitlines()[-TAIL_LINES:])
    return {
        "id": i, "step": ep.step, "task": ep.task, "sample": ep.sample_index, "group": ep.group_id,
        "reward": ep.reward, "adv": ep.advantage, "outcome": ep.outcome, "fclass": ep.failure_class,
        "end": ep.end_reason, "num_turns": ep.num_turns, "len": ep.generated_tokens,
        "response_tokens": ep.response_tokens, "trained_tokens": ep.trained_tokens,
        "cut": ep.hit_length_limit, "masked": ep.masked, "tamper": ep.tampered,
        "tamper_reasons": ep.tamper,
        "reason": verifier_reason(ep.verifier_tail, ep.detail), "tail": tail, "detail": ep.detail,
        **turns_json(ep.messages, protocol),
    }


CSS = """body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:18px}
#filters{display:flex;flex-wrap:wrap;gap:8px 14px;align-items:end;margin:8px 0;font-size:13px}
#filters label{display:flex;flex-direction:column}#filters input{width:90px}#filters input#f-task{width:160px}
table{border-collapse:collapse;font-size:12.5px;width:100%}td,th{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left}
th{background:#f2f2f2;cursor:pointer;position:sticky;top:0}tr.ep{cursor:pointer}tr.ep:hover{outline:2px solid #888}
tr.sel{outline:2px solid #000}.o-passed{background:#e3f5e1}.o-failed{background:#fbe4e4}.o-other{background:#eee}
.badge{display:inline-block;padding:0 5px;border-radius:3px;font-size:11px;margin-right:3px;color:#fff}
.b-cut{background:#ff7f0e}.b-masked{background:#7f7f7f}.b-tamper{background:#d62728}
#list{max-height:48vh;overflow:auto;border:1px solid #ccc}#detail{margin-top:12px}
pre{white-space:pre-wrap;word-break:break-word;margin:3px 0;padding:6px;background:#fafafa;border-left:4px solid #999;font-size:12px}
pre.model{border-color:#2ca02c}pre.cmd{border-color:#1f77b4;background:#eef4fb}pre.out{border-color:#9467bd}
pre.tail{border-color:#d62728}pre.err{border-color:#ff7f0e}.turn{margin:8px 0;padding-left:6px;border-left:2px solid #ddd}
#count{font-size:13px;margin:4px 0}"""

COLUMNS = [("step", "step"), ("task", "task"), ("sample", "#"), ("outcome", "outcome"), ("reward", "reward"),
           ("adv", "advantage"), ("len", "gen tokens"), ("num_turns", "turns"), ("end", "end"), ("flags", "flags"),
           ("reason", "verifier says")]

SCRIPT = r"""
const EPS = JSON.parse(document.getElementById('episodes').textContent);
const COLS = JSON.parse(document.getElementById('columns').textContent);
const $ = id => document.getElementById(id);
const esc = s => String(s ?? '').replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
const FIELDS = ['step','task','outcome','reward_min','reward_max','adv','len_min','len_max','flag'];
function state() { return new URLSearchParams(location.hash.slice(1)); }
function setState(mut) { const s = state(); mut(s); location.hash = s.toString(); }
function outcomeClass(o) { return o === 'passed' ? 'o-passed' : o === 'failed' ? 'o-failed' : 'o-other'; }
function flags(e) { return (e.cut ? '<span class="badge b-cut">cut at limit</span>' : '') +
  (e.masked ? '<span class="badge b-masked">masked</span>' : '') + (e.tamper ? '<span class="badge b-tamper">tamper</span>' : ''); }
function num(v) { return v === '' || v === null ? null : Number(v); }
function keep(e, s) {
  const step = s.get('step'), task = s.get('task'), outcome = s.get('outcome'), adv = s.get('adv'), flag = s.get('flag');
  if (step && String(e.step) !== step) return false;
  if (task && !e.task.toLowerCase().includes(task.toLowerCase())) return false;
  if (outcome && e.outcome !== outcome) return false;
  const rmin = num(s.get('reward_min')), rmax = num(s.get('reward_max')), lmin = num(s.get('len_min')), lmax = num(s.get('len_max'));
  if (rmin !== null && e.reward < rmin) return false;
  if (rmax !== null && e.reward > rmax) return false;
  if (lmin !== null && e.len < lmin) return false;
  if (lmax !== null && e.len > lmax) return false;
  if (adv === 'pos' && !(e.adv > 0)) return false;
  if (adv === 'neg' && !(e.adv < 0)) return false;
  if (adv === 'zero' && e.adv) return false;
  if (flag && !e[flag]) return false;
  return true;
}
function cell(e, key) {
  if (key === 'flags') return flags(e);
  if (key === 'adv') return e.adv === null ? '-' : (e.adv > 0 ? '+' : '') + e.adv.toFixed(4);
  if (key === 'reward') return String(e.reward);
  return esc(e[key] ?? '-');
}
function drawList() {
  const s = state(), key = s.get('sort'), desc = s.get('desc') === '1';
  let rows = EPS.filter(e => keep(e, s));
  if (key) rows.sort((a, b) => { const x = a[key], y = b[key];
    const c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x ?? '').localeCompare(String(y ?? ''));
    return desc ? -c : c; });
  const counts = {};
  rows.forEach(e => counts[e.outcome] = (counts[e.outcome] || 0) + 1);
  $('count').textContent = `${rows.length} of ${EPS.length} episodes shown` +
    (rows.length ? ': ' + Object.entries(counts).map(([o, n]) => `${o} ${n}`).join(', ') : '');
  const head = COLS.map(([k, t]) => `<th data-key="${k}">${esc(t)}${k === key ? (desc ? ' ▼' : ' ▲') : ''}</th>`).join('');
  const body = rows.map(e => `<tr class="ep ${outcomeClass(e.outcome)}${String(e.id) === s.get('ep') ? ' sel' : ''}" ` +
    `data-id="${e.id}" data-outcome="${esc(e.outcome)}">` + COLS.map(([k]) => `<td>${cell(e, k)}</td>`).join('') + '</tr>').join('');
  $('table').innerHTML = `<thead><tr>${head}</tr></thead><tbody>${body}</tbody>`;
}
function drawDetail() {
  const id = state().get('ep'), e = EPS.find(x => String(x.id) === id);
  if (!e) { $('detail').innerHTML = '<p>Click an episode to read it.</p>'; return; }
  const facts = [`reward ${e.reward}`, `advantage ${cell(e, 'adv')}`, `outcome ${e.outcome}`,
    `failure class ${e.fclass}`, `end ${e.end}${e.cut ? ' (a reply was cut at max_new_tokens)' : ''}`,
    `${e.len} generated tokens`, `${e.response_tokens} response tokens, ${e.trained_tokens} trained (loss_mask 1)` +
    (e.masked ? ': masked, the update skips this episode' : '')];
  let out = `<h2>${esc(e.task)} sample ${e.sample}${e.step === null ? '' : ' (step ' + e.step + ')'} ${flags(e)}</h2>` +
    `<p>${facts.map(esc).join(' · ')}</p><p><b>Verifier:</b> ${esc(e.reason || '(no output)')}</p>` +
    `<details><summary>task prompt</summary><pre>${esc(e.prompt)}</pre></details>`;
  e.turns.forEach((t, i) => {
    out += `<div class="turn"><b>turn ${i + 1}</b>` + (t.text ? `<pre class="model">${esc(t.text)}</pre>` : '') +
      (t.error ? `<pre class="err">parse error: ${esc(t.error)}</pre>` : '') +
      t.commands.map(c => `<pre class="cmd">$ ${esc(c)}</pre>`).join('') +
      t.outputs.map(o => `<pre class="out">${esc(o)}</pre>`).join('') + '</div>';
  });
  if (e.tamper_reasons.length) out += `<h3>tamper signal</h3><pre class="tail">${esc(e.tamper_reasons.join('\n'))}</pre>`;
  out += `<h3>verifier output (last lines)</h3><pre class="tail">${esc(e.tail || e.detail || '(none)')}</pre>`;
  $('detail').innerHTML = out;
}
function syncInputs() {
  const s = state();
  FIELDS.forEach(f => { const el = $('f-' + f); if (el && document.activeElement !== el) el.value = s.get(f) ?? ''; });
}
function draw() { syncInputs(); drawList(); drawDetail(); }
FIELDS.forEach(f => $('f-' + f).addEventListener('input', ev =>
  setState(s => ev.target.value === '' ? s.delete(f) : s.set(f, ev.target.value))));
$('table').addEventListener('click', ev => {
  const th = ev.target.closest('th');
  if (th) { const k = th.dataset.key; setState(s => { s.set('desc', s.get('sort') === k && s.get('desc') !== '1' ? '1' : '0');
    s.set('sort', k); }); return; }
  const tr = ev.target.closest('tr.ep');
  if (tr) setState(s => s.set('ep', tr.dataset.id));
});
$('reset').addEventListener('click', () => { location.hash = ''; });
window.addEventListener('hashchange', draw);
draw();
"""


def _options(values: list[str]) -> str:
    return '<option value="">all</option>' + "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>'
                                                    for v in values)


def _filters(eps: EpisodeSet) -> str:
    steps = sorted({e.step for e in eps.episodes if e.step is not None})
    outcomes = sorted({e.outcome for e in eps.episodes})
    fields = [
        ("step", "step", f'<select id="f-step">{_options([str(s) for s in steps])}</select>'),
        ("task", "task contains", '<input id="f-task" type="search">'),
        ("outcome", "outcome", f'<select id="f-outcome">{_options(outcomes)}</select>'),
        ("reward_min", "reward ≥", '<input id="f-reward_min" type="number" step="any">'),
        ("reward_max", "reward ≤", '<input id="f-reward_max" type="number" step="any">'),
        ("adv", "advantage", '<select id="f-adv"><option value="">all</option><option value="pos">&gt; 0</option>'
                             '<option value="neg">&lt; 0</option><option value="zero">= 0</option></select>'),
        ("len_min", "gen tokens ≥", '<input id="f-len_min" type="number">'),
        ("len_max", "gen tokens ≤", '<input id="f-len_max" type="number">'),
        ("flag", "flag", '<select id="f-flag"><option value="">any</option><option value="tamper">tamper</option>'
                         '<option value="cut">cut at limit</option><option value="masked">masked</option></select>'),
    ]
    inputs = "".join(f"<label>{html.escape(label)}{widget}</label>" for _, label, widget in fields)
    return f'<div id="filters">{inputs}<button id="reset">reset</button></div>'


def _json_script(element_id: str, data: object) -> str:
    """Data for the script, safe inside ``<script>`` (``</`` cannot close the element)."""
    text = json.dumps(data, ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def render_html(eps: EpisodeSet) -> str:
    """The viewer page of ``eps`` (every episode, self-contained: no network, no files)."""
    protocol = _protocol(eps)
    rows = [episode_row(i, e, protocol) for i, e in enumerate(eps.episodes)]
    stats = {k: v for k, v in eps.summary.items() if k.startswith("pass@") or k == metric_keys.REWARD_MEAN}
    summary = ", ".join(f"{html.escape(k)}: {v:.4f}" for k, v in stats.items())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>swerl view: {html.escape(str(eps.source))}"
            f"</title><style>{CSS}</style></head><body><h1>{html.escape(describe(eps))}</h1>"
            f"{f'<p>{summary}</p>' if summary else ''}{_filters(eps)}<div id='count'></div>"
            f"<div id='list'><table id='table'></table></div><div id='detail'></div>"
            f"{_json_script('episodes', rows)}{_json_script('columns', COLUMNS)}<script>{SCRIPT}</script>"
            "</body></html>\n")


def write_html(eps: EpisodeSet, out: Path) -> Path:
    """Write :func:`render_html` to ``out`` (temp file + rename)."""
    return atomic_write_text(out, render_html(eps))
