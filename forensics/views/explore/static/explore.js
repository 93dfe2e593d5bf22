/* hsf explorer: a slots × tokens heatmap of log norms with hover, click-linked views, file list and export.
 * One ES module for anywidget (the kernel syncs the state) and, with its last line cut, the report's static copy
 * (the same render() fed the state as embedded JSON). Plain JS, no dependencies, no network. */

const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
  [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
const ZERO_RGB = [0, 0, 0];         // an all-zero row: log norm −∞
const NONFINITE_RGB = [255, 0, 255];  // NaN / Inf
const VERDICT_CLASS = { "pass": "pass", "fail": "fail", "cannot tell": "cannot", "warn": "warn", "identified": "identified",
  "unreadable": "unreadable" };
const LABEL_W = 118;   // y-axis label column, px
const FILES_W = 250;   // file list, px
const AXIS_H = 64;     // x-axis token labels, px
const HEAT_MAX_H = 300;  // the heatmap's height cap, px
const CONTEXT_TOKENS = 12;  // tokens either side of the selection in the context strip
const MIN_WINDOW = 16;  // the narrowest zoom, in columns
const ROOT_MAX_H = 800;  // the explorer's height cap (explore.css .hsf-x max-height), px
const LENS_LINKED_H = 110;  // the linked table's height while the lens overview is open, px
const LENS_MIN_H = 90;  // the lens overview's smallest scroll box, px

function floats(v) {
  if (v == null) return new Float32Array(0);
  if (v instanceof DataView) return new Float32Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  if (v instanceof ArrayBuffer) return new Float32Array(v.slice(0));
  if (ArrayBuffer.isView(v)) return new Float32Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  return Float32Array.from(v);
}

function ints(v) {
  if (v == null) return new Int32Array(0);
  if (v instanceof DataView) return new Int32Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  if (v instanceof ArrayBuffer) return new Int32Array(v.slice(0));
  if (ArrayBuffer.isView(v)) return new Int32Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  return Int32Array.from(v);
}

function h(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

/* forensics.views.format.num's rule, the one number style of every view: 3 significant digits (4 from 100 up),
 * whole numbers with thousands separators from 1,000 to 10 million, scientific below 1e-3 and from 1e7 up. */
function fmt(x) {
  if (x == null || Number.isNaN(x)) return "—";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  const a = Math.abs(x);
  if (a >= 1e3 && a < 1e7) return Math.round(x).toLocaleString("en-US");
  return gfmt(x, a !== 0 && (a >= 1e7 || a < 1e-3) ? 3 : a >= 100 ? 4 : 3);
}

function gfmt(x, p) {  // Python's f"{x:.{p}g}": p significant digits, trailing zeros cut
  if (x === 0) return "0";
  const [m, e] = x.toExponential(p - 1).split("e");
  const exp = Number(e);
  const trim = (t) => (t.includes(".") ? t.replace(/0+$/, "").replace(/\.$/, "") : t);
  if (exp < -4 || exp >= p) return trim(m) + "e" + (exp < 0 ? "-" : "+") + String(Math.abs(exp)).padStart(2, "0");
  return trim(x.toFixed(Math.max(0, p - 1 - exp)));
}

function verdictWord(v) {  // a file's or a slot's outcome as every badge of the report writes it
  return v && v !== "info" && v !== "no claim" ? v.toUpperCase() : "NO CLAIM";  // info: nothing claimed
}

function verdictMark(v) {  // the mark after a slot's label: ✓ pass, ? cannot tell, ! warn, ✗ fail, none without claim
  return { "pass": " ✓", "cannot tell": " ?", "warn": " !", "fail": " ✗" }[v] || "";
}

function cutLeft(name, n) {  // a path cut from the left, so the file names of one folder stay apart
  return name.length <= n ? name : "…" + name.slice(name.length - n + 1);
}

function showToken(t) {
  if (t == null) return "";
  return t.replace(/\n/g, "⏎").replace(/\t/g, "⇥").replace(/ /g, "·") || "∅";
}

function colour(t) {
  const x = Math.max(0, Math.min(1, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x)), f = x - i;
  const a = VIRIDIS[i], b = VIRIDIS[i + 1];
  return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
}

/* The state as the drawing code reads it, decoded once per change. */
function decode(model) {
  const meta = model.get("meta") || {};
  const S = (meta.names || []).length;
  const starts = ints(model.get("starts"));
  const C = Math.max(0, starts.length - 1);
  return {
    meta, S, C, starts, norms: floats(model.get("norms")), cosPrev: floats(model.get("cos_prev")),
    cosSame: floats(model.get("cos_same")), tokens: model.get("tokens") || [], ids: model.get("ids") || [],
  };
}

function columnOf(st, pos) {  // the column holding token pos (binary search over starts)
  let lo = 0, hi = st.C - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (st.starts[mid] <= pos) lo = mid; else hi = mid - 1;
  }
  return lo;
}

function scales(st, global) {  // per row [lo, hi]: the 2nd–98th percentile of log10 norm (finite, positive)
  const pick = (logs) => {
    if (!logs.length) return [0, 1];
    logs.sort((a, b) => a - b);
    const q = (p) => logs[Math.min(logs.length - 1, Math.max(0, Math.round(p * (logs.length - 1))))];
    return [q(0.02), q(0.98)];
  };
  const rows = [], all = [];
  for (let r = 0; r < st.S; r++) {
    const logs = [];
    for (let c = 0; c < st.C; c++) {
      const v = st.norms[r * st.C + c];
      if (v > 0 && Number.isFinite(v)) logs.push(Math.log10(v));
    }
    rows.push(pick(logs.slice()));
    if (global) for (const l of logs) all.push(l);
  }
  if (!global) return rows;
  const g = pick(all);
  return rows.map(() => g);
}

function render({ model, el }) {
  const root = h("div", "hsf-x");
  root.tabIndex = 0;
  el.appendChild(root);
  const bar = h("div", "hsf-x-bar");
  const fileSel = h("select", "hsf-x-filesel");
  fileSel.setAttribute("aria-label", "file");
  const title = h("span", "hsf-x-title");
  const verdict = h("span", "hsf-x-badge");
  const status = h("span", "hsf-x-status");
  const scaleSel = h("select", "hsf-x-scale");
  scaleSel.setAttribute("aria-label", "colour scale");
  scaleSel.title = "colour: log10 norm, 2nd–98th percentile per slot, or one scale for all slots";
  [["row", "log ‖x‖ per slot"], ["global", "log ‖x‖ shared"]].forEach(([v, t]) => {
    const o = h("option", null, t); o.value = v; scaleSel.appendChild(o);
  });
  const button = (cls, text, title, key, value) => {  // a toolbar button: its action read from data-<key>
    const b = h("button", cls, text);
    b.title = title;
    b.dataset[key] = value;
    return b;
  };
  const svgBtn = button("hsf-x-export", "SVG", "export the view as SVG", "format", "svg");
  const pngBtn = button("hsf-x-export", "PNG", "export the view as PNG", "format", "png");
  const zoomIn = button("hsf-x-zoom", "+", "zoom in on the selected token (key +)", "zoom", "in");
  const zoomOut = button("hsf-x-zoom", "−", "zoom out (key −)", "zoom", "out");
  const keys = h("span", "hsf-x-keys", "←/→ token · ↑/↓ file · +/− zoom");
  bar.append(fileSel, title, verdict, status, zoomOut, zoomIn, scaleSel, svgBtn, pngBtn, keys);

  const body = h("div", "hsf-x-body");
  const files = h("div", "hsf-x-files");
  const main = h("div", "hsf-x-main");
  const plot = h("div", "hsf-x-plot");
  const ylab = h("div", "hsf-x-ylab");
  const heatBox = h("div", "hsf-x-heatbox");
  const heat = h("canvas", "hsf-x-heat");
  const bands = h("div", "hsf-x-bands");
  const cursor = h("div", "hsf-x-cursor");
  const axis = h("canvas", "hsf-x-axis");
  heatBox.append(heat, bands, cursor, axis);
  plot.append(ylab, heatBox);
  const context = h("div", "hsf-x-context");
  const linked = h("div", "hsf-x-linked");
  const lensBox = h("details", "hsf-x-lensmap");
  lensBox.hidden = true;
  lensBox.addEventListener("toggle", () => fitLensMap());
  main.append(plot, context, linked, lensBox);
  body.append(files, main);
  const tip = h("div", "hsf-x-tip");
  tip.hidden = true;
  root.append(bar, body, tip);

  let st = decode(model);
  let rowH = 20, colW = 1, plotW = 600, disp = [];  // disp[d] = [first column, last column + 1]
  let v0 = 0, v1 = null, shown = null;  // the zoomed window of columns (v1 null: all); the file it belongs to

  function layout() {
    const W = root.clientWidth || el.clientWidth || 1000;
    const nfiles = (model.get("files") || []).length;
    files.hidden = nfiles < 2;
    fileSel.hidden = nfiles < 2;
    plotW = Math.max(200, W - LABEL_W - (nfiles < 2 ? 0 : FILES_W + 8) - 24);
    rowH = Math.max(8, Math.min(28, Math.floor(HEAT_MAX_H / Math.max(1, st.S))));
    if (!st.C || !st.S) { disp = []; colW = 1; return; }  // an unreadable file: its error, no heatmap
    const [a, b] = windowCols();
    const N = b - a, D = Math.max(1, Math.min(N, Math.floor(plotW)));
    colW = plotW / D;
    disp = [];
    for (let d = 0; d < D; d++) {
      const lo = a + Math.floor(d * N / D);
      disp.push([lo, Math.max(lo + 1, a + Math.floor((d + 1) * N / D))]);
    }
  }

  function windowCols() {  // the columns in view: all, or the zoomed window [v0, v1)
    if (v1 == null || v1 - v0 >= st.C) return [0, Math.max(1, st.C)];
    const n = v1 - v0, a = Math.max(0, Math.min(v0, st.C - n));
    return [a, a + n];
  }

  function dispOf(col) {  // the display column showing data column col; -1 outside the window
    if (!disp.length || col < disp[0][0] || col >= disp[disp.length - 1][1]) return -1;
    for (let d = 0; d < disp.length; d++) if (col < disp[d][1]) return d;
    return -1;
  }

  function zoom(factor) {  // around the selection (else the window's middle); MIN_WINDOW columns at least
    const [a, b] = windowCols();
    const n = Math.max(Math.min(st.C, MIN_WINDOW), Math.min(st.C, Math.round((b - a) * factor)));
    const pos = model.get("selected");
    const mid = pos != null && pos >= 0 ? columnOf(st, pos) : (a + b) / 2;
    if (n >= st.C) { v0 = 0; v1 = null; } else {
      v0 = Math.max(0, Math.min(st.C - n, Math.round(mid - n / 2)));
      v1 = v0 + n;
    }
    draw();
  }

  function follow(col) {  // pan the zoomed window to keep column col in view
    if (v1 == null) return false;
    const [a, b] = windowCols();
    if (col >= a && col < b) return false;
    const n = b - a;
    v0 = Math.max(0, Math.min(st.C - n, col < a ? col : col - n + 1));
    v1 = v0 + n;
    return true;
  }

  function cellMax(r, d) {  // the largest norm of row r over display column d (NaN wins)
    let m = -Infinity;
    for (let c = disp[d][0]; c < disp[d][1]; c++) {
      const v = st.norms[r * st.C + c];
      if (Number.isNaN(v)) return NaN;
      if (v > m) m = v;
    }
    return m;
  }

  function drawHeat(ctx, scaleX, scaleY) {
    const sc = scales(st, scaleSel.value === "global");
    const D = disp.length;
    const off = document.createElement("canvas");
    off.width = Math.max(1, D); off.height = Math.max(1, st.S);
    const octx = off.getContext("2d");
    const img = octx.createImageData(off.width, off.height);
    for (let r = 0; r < st.S; r++) {
      const [lo, hi] = sc[r];
      for (let d = 0; d < D; d++) {
        const v = cellMax(r, d);
        let rgb;
        if (!Number.isFinite(v)) rgb = NONFINITE_RGB;
        else if (v <= 0) rgb = ZERO_RGB;
        else rgb = colour(hi > lo ? (Math.log10(v) - lo) / (hi - lo) : 0.5);
        const k = 4 * (r * off.width + d);
        img.data[k] = rgb[0]; img.data[k + 1] = rgb[1]; img.data[k + 2] = rgb[2]; img.data[k + 3] = 255;
      }
    }
    octx.putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, 0, 0, D * colW * scaleX, st.S * rowH * scaleY);
  }

  function drawAxis(ctx, x0, y0, ratio) {
    ctx.save();
    ctx.font = `${10 * ratio}px sans-serif`;
    ctx.fillStyle = "#333";
    const step = Math.max(1, Math.ceil(12 / colW));
    for (let d = 0; d < disp.length; d += step) {
      const c = disp[d][0];
      const text = st.tokens.length ? showToken(st.tokens[c]) : String(st.starts[c]);
      ctx.save();
      ctx.translate(x0 + (d + 0.5) * colW * ratio + 3 * ratio, y0 + 4 * ratio);
      ctx.rotate(Math.PI / 2);
      ctx.fillText(text.length > 9 ? text.slice(0, 8) + "…" : text, 0, 0);
      ctx.restore();
    }
    ctx.restore();
  }

  function draw() {
    layout();
    const dpr = window.devicePixelRatio || 1;
    const meta = st.meta;
    title.textContent = `${meta.name || meta.path || ""} — ${meta.format || ""}, ${meta.num_tokens || 0} tokens` +
      (meta.binned ? ` in ${st.C} columns (max per column)` : "") + `, ${st.S} slots` + zoomNote();
    if (meta.error) title.textContent = `${meta.name || ""}: unreadable`;
    const fv = meta.file_verdict;
    verdict.textContent = fv || meta.fingerprinted ? verdictWord(fv) : "…";
    verdict.className = "hsf-x-badge " + (VERDICT_CLASS[fv] ? "v-" + VERDICT_CLASS[fv] : "v-none");
    status.textContent = model.get("status") || "";
    heat.width = Math.max(1, Math.round(plotW * dpr)); heat.height = Math.max(1, Math.round(st.S * rowH * dpr));
    heat.style.width = plotW + "px"; heat.style.height = st.S * rowH + "px";
    axis.width = heat.width; axis.height = Math.round(AXIS_H * dpr);
    axis.style.width = plotW + "px"; axis.style.height = AXIS_H + "px";
    heatBox.style.width = plotW + "px";
    heatBox.style.height = st.S * rowH + AXIS_H + "px";
    const ctx = heat.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, heat.width, heat.height);
    if (st.S && st.C) drawHeat(ctx, dpr, dpr);
    const actx = axis.getContext("2d");
    actx.clearRect(0, 0, axis.width, axis.height);
    drawAxis(actx, 0, 0, dpr);
    ylab.replaceChildren();
    ylab.style.height = st.S * rowH + "px";
    for (let r = 0; r < st.S; r++) {
      const v = (meta.verdicts || [])[r];
      const lab = h("div", "hsf-x-ylabel " + (VERDICT_CLASS[v] ? "v-" + VERDICT_CLASS[v] : "v-none"));
      lab.style.height = rowH + "px"; lab.style.lineHeight = rowH + "px";
      lab.style.fontSize = Math.min(12, Math.max(8, rowH - 2)) + "px";
      lab.textContent = (meta.labels || [])[r] + verdictMark(v);
      lab.title = `${(meta.names || [])[r]}: ${v ? v.toUpperCase() : "no claim"}` +
        ((meta.verdict_why || [])[r] ? ` — ${meta.verdict_why[r]}` : "");
      lab.dataset.slot = String(r);
      ylab.appendChild(lab);
    }
    drawBands();
    drawFiles();
    drawSelection();
    drawLensMap();
  }

  function zoomNote() {
    if (v1 == null) return "";
    const [a, b] = windowCols();
    return ` · showing tokens ${st.starts[a]}–${st.starts[b] - 1}`;
  }

  function drawBands() {
    bands.replaceChildren();
    for (const b of (st.meta.bands || [])) {
      if (b.slot >= st.S) continue;
      const [a, z] = windowCols();
      const c0 = Math.max(a, columnOf(st, b.first)), c1 = Math.min(z - 1, columnOf(st, b.last));
      if (c0 > c1) continue;  // outside the zoomed window
      const d0 = dispOf(c0), d1 = dispOf(c1);
      const e = h("div", "hsf-x-band sev-" + (b.severity || "info") + " kind-" + String(b.kind).replace(/\W+/g, "-"));
      e.style.left = d0 * colW + "px";
      e.style.width = Math.max(2, (d1 - d0 + 1) * colW) + "px";
      e.style.top = b.slot * rowH + "px";
      e.style.height = rowH + "px";
      e.dataset.kind = b.kind; e.dataset.slot = b.slot; e.dataset.first = b.first; e.dataset.last = b.last;
      e.title = `${b.kind}: tokens ${b.first}–${b.last}` + (b.message ? ` — ${b.message}` : "");
      bands.appendChild(e);
    }
  }

  function drawFiles() {
    const list = model.get("files") || [];
    const cur = model.get("file") || 0;
    files.replaceChildren();
    if (fileSel.options.length !== list.length) {
      fileSel.replaceChildren();
      list.forEach((f, k) => {
        const o = h("option", null, cutLeft(f.name, 30)); o.value = String(k); o.title = f.name; fileSel.appendChild(o);
      });
    }
    fileSel.value = String(cur);
    list.forEach((f, k) => {
      const row = h("div", "hsf-x-file" + (k === cur ? " current" : ""));
      const b = h("span", "hsf-x-badge " + (VERDICT_CLASS[f.verdict] ? "v-" + VERDICT_CLASS[f.verdict] : "v-none"),
        f.verdict ? verdictWord(f.verdict) : "…");  // null: not fingerprinted yet (the widget)
      // cut from the left (CSS direction rtl); the marks keep the name's own left-to-right order
      row.append(b, h("span", "hsf-x-fname", "\u200e" + f.name + "\u200e"));
      row.title = f.name + ": " + (f.verdict || "not fingerprinted yet");
      row.dataset.k = String(k);
      row.addEventListener("click", () => setFile(k));
      files.appendChild(row);
    });
  }

  function showCurrentFile() {  // on a user's action only: the list scrolls itself, never the page
    const c = files.querySelector(".current");
    if (!c) return;
    const top = c.offsetTop - files.offsetTop, bottom = top + c.offsetHeight;
    if (top < files.scrollTop) files.scrollTop = top;
    else if (bottom > files.scrollTop + files.clientHeight) files.scrollTop = bottom - files.clientHeight;
  }

  function tokenText(c) { return st.tokens.length ? st.tokens[c] : null; }

  function colRange(c) { return [st.starts[c], st.starts[c + 1] - 1]; }

  function drawSelection() {
    const pos = model.get("selected");
    linked.replaceChildren();
    context.replaceChildren();
    if (pos == null || pos < 0 || !st.C) {
      cursor.hidden = true;
      linked.appendChild(h("div", "hsf-x-hint", "Click a cell (or press →) to see that token across every slot."));
      return;
    }
    const c = columnOf(st, pos);
    const d = dispOf(c);
    cursor.hidden = d < 0;
    cursor.style.left = d * colW + "px"; cursor.style.width = Math.max(2, colW) + "px";
    cursor.style.height = st.S * rowH + "px";
    // the context strip: the tokens around the selection, each clickable
    for (let k = Math.max(0, c - CONTEXT_TOKENS); k <= Math.min(st.C - 1, c + CONTEXT_TOKENS); k++) {
      const t = h("span", "hsf-x-tok" + (k === c ? " sel" : ""), tokenText(k) != null ? showToken(tokenText(k))
        : String(st.starts[k]));
      t.title = `token ${st.starts[k]}`;
      t.addEventListener("click", () => select(st.starts[k]));
      context.appendChild(t);
    }
    const [a, b] = colRange(c);
    const head = h("div", "hsf-x-sel");
    const id = st.ids.length ? st.ids[c] : null;
    head.textContent = (a === b ? `token ${a}` : `tokens ${a}–${b} (largest norm, smallest cosines of the column)`) +
      (tokenText(c) != null ? ` “${showToken(tokenText(c))}”` : "") + (id != null ? ` · id ${id}` : "");
    linked.appendChild(head);
    const lens = model.get("lens") || {};
    const hasModel = !!model.get("has_model");
    const lensHere = lens.pos === pos && lens.file === (model.get("file") || 0);
    const table = h("table", "hsf-x-table");
    const tr = h("tr");
    ["slot", "verdict", "‖x‖", "cos to previous slot", "cos to same id elsewhere"].concat(
      hasModel ? ["logit lens top-5 (lm_head(norm(h)))"] : []).forEach((t) => tr.appendChild(h("th", null, t)));
    const thead = h("thead"); thead.appendChild(tr); table.appendChild(thead);
    const tbody = h("tbody");
    for (let r = 0; r < st.S; r++) {
      const row = h("tr");
      const v = (st.meta.verdicts || [])[r];
      row.appendChild(h("td", "lab", st.meta.labels[r]));
      row.appendChild(h("td", "v-" + (VERDICT_CLASS[v] || "none"), v ? verdictWord(v) : "—"));
      row.appendChild(h("td", "num", fmt(st.norms[r * st.C + c])));
      row.appendChild(h("td", "num", fmt(st.cosPrev[r * st.C + c])));
      row.appendChild(h("td", "num", fmt(st.cosSame[r * st.C + c])));
      if (hasModel) {
        let text = "computing…";
        if (lensHere) {
          const lr = (lens.rows || [])[r] || {};
          text = lr.note ? lr.note : (lr.texts || []).map((t, i) => `${showToken(t)} ${fmt(lr.probs[i])}`).join("  ");
        } else if (lens.error) text = lens.error;
        row.appendChild(h("td", "lens", text));
      }
      tbody.appendChild(row);
    }
    table.appendChild(tbody);
    linked.appendChild(table);
  }

  /* The logit-lens overview (tuned-lens' layers × tokens plot): one row per slot, one column per token of the
   * first ones, each cell the top-1 next token of lm_head(norm(h)) coloured by its probability. */
  function lensCell(m, r, c) {
    const p = (m.probs[r] || [])[c];
    const text = (m.texts[r] || [])[c];
    const td = h("td", "hsf-x-lmcell", text ? lensText(text) : "—");
    if (p != null) {
      const rgb = colour(p);
      td.style.background = `rgb(${rgb.map(Math.round).join(",")})`;
      td.style.color = p > 0.55 ? "#000" : "#fff";
    }
    const pos = m.positions[c];
    td.title = `${(st.meta.labels || [])[r]} · token ${pos}` + (tokenAt(pos) != null ? ` “${showToken(tokenAt(pos))}”` : "")
      + (text ? ` → “${showToken(text)}” p=${fmt(p)}` : ` — ${(m.notes || [])[r] || "no prediction"}`);
    td.dataset.pos = String(pos); td.dataset.slot = String(r);
    td.addEventListener("click", () => select(pos));
    return td;
  }

  function lensText(t) { const v = showToken(t); return v.length > 7 ? v.slice(0, 6) + "…" : v; }

  function tokenAt(pos) {  // the text of token pos when the heatmap has one column per token
    return st.C === (st.meta.num_tokens || 0) && st.tokens.length ? st.tokens[pos] : null;
  }

  function drawLensMap() {
    const m = model.get("lens_map") || {};
    const here = m.file === (model.get("file") || 0) && Array.isArray(m.positions);
    lensBox.hidden = !model.get("has_model") && !here;  // a static copy shows one only when it carries it
    if (lensBox.hidden) return;
    const open = lensBox.open;
    lensBox.replaceChildren();
    const n = here ? m.positions.length : 0;
    const sum = h("summary", "hsf-x-lmsum", "logit lens overview: top-1 next token per slot × token" +
      (here ? ` (first ${n} of ${m.num_tokens} tokens; colour = probability)` : m.error ? ` — ${m.error}` :
        " — computing…"));
    lensBox.append(sum);
    lensBox.open = open;
    if (!here) return;
    const wrap = h("div", "hsf-x-lmwrap");
    const table = h("table", "hsf-x-lmap");
    const head = h("tr");
    head.appendChild(h("th", "hsf-x-lmlab", "slot \\ token"));
    for (let c = 0; c < n; c++) {
      const t = tokenAt(m.positions[c]);
      const th = h("th", null, t != null ? lensText(t) : String(m.positions[c]));
      th.title = `token ${m.positions[c]}` + (t != null ? ` “${showToken(t)}”` : "");
      head.appendChild(th);
    }
    const thead = h("thead"); thead.appendChild(head); table.appendChild(thead);
    const tbody = h("tbody");
    for (let r = st.S - 1; r >= 0; r--) {  // the deepest slot on top, as tuned-lens draws it
      const row = h("tr");
      row.appendChild(h("th", "hsf-x-lmlab", (st.meta.labels || [])[r]));
      for (let c = 0; c < n; c++) row.appendChild(lensCell(m, r, c));
      tbody.appendChild(row);
    }
    table.appendChild(tbody);
    wrap.appendChild(table);
    lensBox.appendChild(wrap);
    fitLensMap();
  }

  function fitLensMap() {  // the open overview fits the explorer's 800 px: the linked table gives up height for it
    linked.style.maxHeight = lensBox.open && !lensBox.hidden ? LENS_LINKED_H + "px" : "";
    const wrap = lensBox.querySelector(".hsf-x-lmwrap");
    if (!wrap || !lensBox.open) return;
    // measured as if the linked table were at its full LENS_LINKED_H: a click that fills it moves nothing out of view
    const top = wrap.getBoundingClientRect().top - root.getBoundingClientRect().top + LENS_LINKED_H -
      linked.getBoundingClientRect().height;
    wrap.style.maxHeight = Math.max(LENS_MIN_H, ROOT_MAX_H - top - 8) + "px";
  }

  function select(pos) {
    const T = st.meta.num_tokens || 0;
    if (!T) return;
    pos = Math.max(0, Math.min(T - 1, pos));
    const panned = follow(columnOf(st, pos));
    model.set("selected", pos);
    model.save_changes();
    if (panned) draw(); else drawSelection();
  }

  function setFile(k) {
    const n = (model.get("files") || []).length;
    if (n < 2) return;
    k = Math.max(0, Math.min(n - 1, k));
    if (k === (model.get("file") || 0)) return;
    tip.hidden = true;  // the hovered cell belonged to the file left behind
    model.set("file", k);
    model.save_changes();
    status.textContent = "loading…";
    drawFiles();
    showCurrentFile();
  }

  function cellAt(ev) {
    const box = heat.getBoundingClientRect();
    const x = ev.clientX - box.left, y = ev.clientY - box.top;
    if (!disp.length || x < 0 || y < 0 || x >= box.width || y >= box.height) return null;
    const d = Math.min(disp.length - 1, Math.floor(x / colW)), r = Math.min(st.S - 1, Math.floor(y / rowH));
    return { d, r, x: ev.clientX, y: ev.clientY };
  }

  function showTip(cell) {
    const c0 = disp[cell.d][0], c1 = disp[cell.d][1] - 1;
    const a = st.starts[c0], b = st.starts[c1 + 1] - 1;
    tip.replaceChildren();
    const head = h("div", "hsf-x-tiphead");
    const text = tokenText(c0);
    head.textContent = (text != null ? `“${showToken(text)}”` : "") + (a === b ? ` token ${a}` : ` tokens ${a}–${b}`) +
      (st.ids.length ? ` · id ${st.ids[c0]}` : "") + (a === b ? "" : " (max)");
    tip.appendChild(head);
    const t = h("table");
    for (let r = 0; r < st.S; r++) {
      const row = h("tr", r === cell.r ? "hover" : null);
      row.append(h("td", null, st.meta.labels[r]), h("td", "num", fmt(cellMax(r, cell.d))));
      t.appendChild(row);
    }
    tip.appendChild(t);
    for (const bd of (st.meta.bands || [])) {
      if (bd.slot === cell.r && bd.first <= b && bd.last >= a) {
        tip.appendChild(h("div", "hsf-x-tipband sev-" + bd.severity, `${bd.kind}` + (bd.message ? `: ${bd.message}` : "")));
      }
    }
    tip.hidden = false;
    const rb = root.getBoundingClientRect();
    let left = cell.x - rb.left + 14, top = cell.y - rb.top + 14;
    if (left + 260 > rb.width) left = Math.max(0, cell.x - rb.left - 270);
    tip.style.left = left + "px"; tip.style.top = top + "px";
  }

  heat.addEventListener("mousemove", (ev) => { const c = cellAt(ev); if (c) showTip(c); else tip.hidden = true; });
  heat.addEventListener("mouseleave", () => { tip.hidden = true; });
  heat.addEventListener("click", (ev) => {
    const c = cellAt(ev);
    if (!c) return;
    select(st.starts[disp[c.d][0]]);
    root.focus({ preventScroll: true });
  });
  root.addEventListener("keydown", (ev) => {
    const pos = model.get("selected");
    const c = pos == null || pos < 0 ? -1 : columnOf(st, pos);
    let handled = true;
    if (ev.key === "ArrowRight") select(st.starts[Math.min(st.C - 1, c + 1)]);
    else if (ev.key === "ArrowLeft") select(st.starts[Math.max(0, c - 1)]);
    else if (ev.key === "Home") select(0);
    else if (ev.key === "End") select(st.starts[st.C - 1]);
    else if (ev.key === "ArrowDown") setFile((model.get("file") || 0) + 1);
    else if (ev.key === "ArrowUp") setFile((model.get("file") || 0) - 1);
    else if (ev.key === "+" || ev.key === "=") zoom(0.5);
    else if (ev.key === "-") zoom(2);
    else handled = false;
    if (handled) { ev.preventDefault(); ev.stopPropagation(); }
  });
  fileSel.addEventListener("change", () => setFile(Number(fileSel.value)));
  scaleSel.addEventListener("change", draw);
  zoomIn.addEventListener("click", () => zoom(0.5));
  zoomOut.addEventListener("click", () => zoom(2));
  svgBtn.addEventListener("click", () => exportView("svg"));
  pngBtn.addEventListener("click", () => exportView("png"));

  function exportName(ext) {
    const base = String(st.meta.name || "explore").replace(/[^\w.-]+/g, "_");
    return `${base}.explore.${ext}`;
  }

  function download(blob, name) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }

  function exportView(kind) {
    const W = LABEL_W + plotW + 10, H = 24 + st.S * rowH + AXIS_H;
    if (kind === "png") {
      const ratio = 2, cv = document.createElement("canvas");
      cv.width = W * ratio; cv.height = H * ratio;
      const ctx = cv.getContext("2d");
      ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, cv.width, cv.height);
      ctx.fillStyle = "#000"; ctx.font = `${12 * ratio}px sans-serif`;
      ctx.fillText(title.textContent, 4 * ratio, 16 * ratio);
      ctx.save(); ctx.translate(LABEL_W * ratio, 24 * ratio); drawHeat(ctx, ratio, ratio); ctx.restore();
      ctx.font = `${11 * ratio}px sans-serif`;
      for (let r = 0; r < st.S; r++) ctx.fillText(st.meta.labels[r], 4 * ratio, (24 + (r + 0.7) * rowH) * ratio);
      drawAxis(ctx, LABEL_W * ratio, (24 + st.S * rowH) * ratio, ratio);
      cv.toBlob((b) => download(b, exportName("png")), "image/png");
      return;
    }
    const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;");
    const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif">`,
      `<rect width="${W}" height="${H}" fill="#fff"/>`, `<text x="4" y="16" font-size="12">${esc(title.textContent)}</text>`,
      `<image x="${LABEL_W}" y="24" width="${plotW}" height="${st.S * rowH}" preserveAspectRatio="none" ` +
      `style="image-rendering:pixelated" href="${heat.toDataURL("image/png")}"/>`];
    for (let r = 0; r < st.S; r++) {
      parts.push(`<text x="4" y="${24 + (r + 0.7) * rowH}" font-size="11">${esc(st.meta.labels[r])}</text>`);
    }
    for (const e of bands.children) {
      parts.push(`<rect x="${LABEL_W + parseFloat(e.style.left)}" y="${24 + parseFloat(e.style.top)}" ` +
        `width="${parseFloat(e.style.width)}" height="${parseFloat(e.style.height)}" fill="none" stroke="#e00" ` +
        `stroke-width="1.5"><title>${esc(e.title)}</title></rect>`);
    }
    const step = Math.max(1, Math.ceil(12 / colW));
    for (let d = 0; d < disp.length; d += step) {
      const c = disp[d][0], x = LABEL_W + (d + 0.5) * colW + 3, y = 28 + st.S * rowH;
      const text = st.tokens.length ? showToken(st.tokens[c]) : String(st.starts[c]);
      parts.push(`<text x="${x}" y="${y}" font-size="10" transform="rotate(90 ${x} ${y})">` +
        `${esc(text.length > 9 ? text.slice(0, 8) + "…" : text)}</text>`);
    }
    parts.push("</svg>");
    download(new Blob([parts.join("\n")], { type: "image/svg+xml" }), exportName("svg"));
  }

  let pending = false;
  function redraw() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      st = decode(model);
      const key = `${st.meta.path}|${st.meta.name}|${st.C}`;
      if (key !== shown) { shown = key; v0 = 0; v1 = null; }  // another file: the whole sequence again
      draw();
    });
  }
  const onState = () => redraw();
  const onSel = () => drawSelection();
  const onFiles = () => { tip.hidden = true; drawFiles(); };
  const onStatus = () => { status.textContent = model.get("status") || ""; };
  for (const k of ["meta", "norms", "starts", "tokens"]) model.on("change:" + k, onState);
  model.on("change:lens", onSel);
  model.on("change:lens_map", drawLensMap);
  model.on("change:selected", onSel);
  model.on("change:files", onFiles);
  model.on("change:file", onFiles);
  model.on("change:status", onStatus);
  let ro = null;
  if (typeof ResizeObserver !== "undefined") {
    let lastW = -1;
    ro = new ResizeObserver(() => { const w = root.clientWidth; if (w && w !== lastW) { lastW = w; redraw(); } });
    ro.observe(root);
  }
  shown = `${st.meta.path}|${st.meta.name}|${st.C}`;
  draw();
  return () => {
    for (const k of ["meta", "norms", "starts", "tokens"]) model.off("change:" + k, onState);
    model.off("change:lens", onSel); model.off("change:selected", onSel); model.off("change:files", onFiles);
    model.off("change:lens_map", drawLensMap);
    model.off("change:file", onFiles); model.off("change:status", onStatus);
    if (ro) ro.disconnect();
  };
}

/* The report's static copy: a model over embedded states (no kernel), one per file; binary arrays as base64. */
function staticModel(doc) {
  const handlers = {};
  const b64 = (s) => { const bin = atob(s || ""); const u = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u[i] = bin.charCodeAt(i); return new DataView(u.buffer); };
  const attrs = { files: doc.files, file: 0, selected: -1, lens: {}, has_model: false, status: "", lens_map: {} };
  function load(k) {
    const s = doc.states[k];
    Object.assign(attrs, { meta: s.meta, tokens: s.tokens, ids: s.ids, starts: b64(s.starts), norms: b64(s.norms),
      cos_prev: b64(s.cos_prev), cos_same: b64(s.cos_same) });
    attrs.lens_map = s.lens_map ? { file: k, ...s.lens_map } : {};  // a report drawn with --model carries one
  }
  load(0);
  const fire = (k) => (handlers["change:" + k] || []).slice().forEach((f) => f());
  return {
    get: (k) => attrs[k],
    set(k, v) {
      attrs[k] = v;
      if (k === "file") {  // the kernel's Explorer does the same: new state, the selection kept where it fits
        load(v);
        attrs.selected = Math.min(attrs.selected, (attrs.meta.num_tokens || 0) - 1);
        ["meta", "norms", "selected"].forEach(fire);
      }
      fire(k);
    },
    save_changes() {},
    send() {},
    on(ev, f) { (handlers[ev] = handlers[ev] || []).push(f); },
    off(ev, f) { handlers[ev] = (handlers[ev] || []).filter((g) => g !== f); },
  };
}

function bootStatic() {
  document.querySelectorAll(".hsf-explore-static").forEach((el) => {
    try {
      render({ model: staticModel(JSON.parse(el.getAttribute("data-state"))), el });
    } catch (e) {
      el.textContent = "explorer unavailable: " + e;
    }
  });
}

export default { render };
