// Time-series charts for the console, drawn as SVG from values the page keeps since login.
// Metrics hold their value until the next report, so lines are drawn as steps.
"use strict";

const Chart = (() => {
  const NS = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // About five round tick values covering [lo, hi].
  function ticks(lo, hi) {
    const span = hi - lo || 1;
    const raw = span / 4;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= 5);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step / 1e6; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }

  function clock(t) {
    const d = new Date(t);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
  }

  function short(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return (v / 1e3).toPrecision(3) + "k";
    return String(v);
  }

  // opts: { title, width, height, from, to (ms), series: [{ name, points: [[t, v], ...] }],
  //         band: [[t, "healthy" | "degraded" | "unhealthy" | ...], ...] (a strip below) }
  // Each series keeps its value until its next point; the last one is held until `to`.
  function line(opts) {
    const W = opts.width || 560, H = opts.height || 180;
    const left = 52, right = 12, top = 22, bottom = opts.band ? 36 : 24;
    const plotW = W - left - right, plotH = H - top - bottom;
    const from = opts.from, to = Math.max(opts.to, opts.from + 1000);
    const svg = el("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img" });
    svg.appendChild(el("title", {}, opts.title || "chart"));
    if (opts.title) svg.appendChild(el("text", { x: left, y: 14, class: "chart-title" }, opts.title));

    const values = opts.series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => Number.isFinite(v));
    let lo = Math.min(0, ...values), hi = Math.max(1, ...values);
    if (hi === lo) hi = lo + 1;
    const ys = ticks(lo, hi);
    hi = Math.max(hi, ys[ys.length - 1]);
    const x = (t) => left + ((Math.min(Math.max(t, from), to) - from) / (to - from)) * plotW;
    const y = (v) => top + plotH - ((v - lo) / (hi - lo)) * plotH;

    for (const v of ys) {
      svg.appendChild(el("line", { x1: left, x2: left + plotW, y1: y(v), y2: y(v), class: "grid" }));
      svg.appendChild(el("text", { x: left - 6, y: y(v) + 4, class: "tick tick-y" }, short(v)));
    }
    const xticks = 4;
    for (let i = 0; i <= xticks; i++) {
      const t = from + ((to - from) * i) / xticks;
      const edge = i === 0 ? " tick-first" : i === xticks ? " tick-last" : "";
      svg.appendChild(el("text", { x: x(t), y: top + plotH + 14, class: `tick tick-x${edge}` }, clock(t)));
    }
    svg.appendChild(el("rect", { x: left, y: top, width: plotW, height: plotH, class: "frame" }));

    opts.series.forEach((s, i) => {
      const pts = s.points.filter((p) => Number.isFinite(p[1]));
      if (!pts.length) return;
      let d = `M${x(pts[0][0]).toFixed(1)},${y(pts[0][1]).toFixed(1)}`;
      for (let k = 1; k < pts.length; k++) {
        d += ` H${x(pts[k][0]).toFixed(1)} V${y(pts[k][1]).toFixed(1)}`;
      }
      d += ` H${x(to).toFixed(1)}`;
      svg.appendChild(el("path", { d, class: `series s${i}` }));
      const last = pts[pts.length - 1];
      svg.appendChild(el("circle", { cx: x(last[0]), cy: y(last[1]), r: 3, class: `dot s${i}` }));
      // Legend, right-aligned above the plot.
      svg.appendChild(el("text", { x: left + plotW - i * 150, y: 14, class: `legend s${i}` }, `${s.name}: ${short(last[1])}`));
    });

    if (opts.band && opts.band.length) {
      const by = top + plotH + 20;
      opts.band.forEach((b, k) => {
        const end = k + 1 < opts.band.length ? opts.band[k + 1][0] : to;
        const x0 = x(b[0]), x1 = x(end);
        if (!b[1] || x1 - x0 <= 0) return; // no health known then
        svg.appendChild(el("rect", { x: x0, y: by, width: Math.max(1, x1 - x0), height: 8, class: `band band-${b[1]}` }));
      });
      svg.appendChild(el("text", { x: left - 6, y: by + 8, class: "tick tick-y" }, "health"));
    }
    return svg;
  }

  return { line };
})();
