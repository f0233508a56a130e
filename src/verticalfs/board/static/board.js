/* verticalfs board: the charts (Chart.js), the runs table's sorting and filter, and the live
   updates (server-sent events). Values from result files are only ever set as text (textContent)
   or drawn on a canvas; the only HTML inserted is the board's own server-rendered (escaped) page. */
"use strict";

(function () {
  const charts = [];
  const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000",
                   "#999999", "#882255", "#44AA99", "#117733"];

  function readJSON(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function fmt(x, d) {
    return x === null || x === undefined ? "" : Number(x).toFixed(d === undefined ? 4 : d);
  }

  function mb(x) {
    if (x === null || x === undefined) return "";
    return x < 10 ? Number(x).toPrecision(3) : Number(x).toFixed(1);
  }

  function destroyCharts() {
    while (charts.length) charts.pop().destroy();
  }

  /* ------------------------------------------------------------------ the runs table */
  function initRuns() {
    const table = document.getElementById("runs");
    if (!table) return;
    const body = table.tBodies[0];
    const heads = Array.from(table.tHead.rows[0].cells);
    const filter = document.getElementById("filter");
    const shown = document.getElementById("shown");
    let sortCol = heads.findIndex((h) => h.hasAttribute("aria-sort"));
    let sortDir = -1;

    function value(row, i) {
      const cell = row.cells[i];
      const v = cell.dataset.v;
      return v !== undefined ? v : cell.textContent.trim();
    }

    function sort() {
      if (sortCol < 0) return;
      const numeric = heads[sortCol].dataset.type === "num";
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        let x = value(a, sortCol), y = value(b, sortCol);
        if (numeric) {
          const nx = x === "" ? -Infinity : Number(x), ny = y === "" ? -Infinity : Number(y);
          return (nx - ny) * sortDir;
        }
        return x.localeCompare(y) * sortDir;
      });
      body.replaceChildren(...rows);
      heads.forEach((h, i) => {
        if (i === sortCol) h.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
        else h.removeAttribute("aria-sort");
      });
    }

    function applyFilter() {
      const words = filter.value.toLowerCase().split(/\s+/).filter((w) => w);
      let n = 0;
      for (const row of body.rows) {
        const text = row.textContent.toLowerCase();
        const ok = words.every((w) => text.includes(w));
        row.hidden = !ok;
        if (ok) n += 1;
      }
      shown.textContent = words.length ? `${n} shown` : "";
    }

    heads.forEach((h, i) => {
      h.tabIndex = 0;
      const go = () => {
        sortDir = sortCol === i ? -sortDir : (h.dataset.type === "num" ? -1 : 1);
        sortCol = i;
        sort();
      };
      h.addEventListener("click", go);
      h.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
    });
    filter.addEventListener("input", applyFilter);
    const params = new URLSearchParams(window.location.search);
    if (params.get("q")) {
      filter.value = params.get("q");
      applyFilter();
    }
  }

  /* ------------------------------------------------------------------ a run */
  function initRunCharts() {
    destroyCharts();
    const data = readJSON("run-data");
    if (!data || typeof Chart === "undefined") return data;
    const ph = data.phases;
    const phCanvas = document.getElementById("phases-chart");
    if (phCanvas && ph.names.length) {
      charts.push(new Chart(phCanvas, {
        type: "bar",
        data: {
          labels: ph.names,
          datasets: ph.parties.map((p, i) => ({
            label: p, data: ph.bytes[p].map((b) => b / 1e6), backgroundColor: PALETTE[i % PALETTE.length],
          })),
        },
        options: {
          animation: false, responsive: true, maintainAspectRatio: false,
          scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: "MB" } } },
          plugins: {
            tooltip: {
              callbacks: {
                label: (c) => `${c.dataset.label}: ${mb(c.parsed.y)} MB`,
                footer: (items) => {
                  const s = ph.seconds[items[0].dataIndex];
                  return s === null || s === undefined ? "" : `${fmt(s, 2)} s`;
                },
              },
            },
          },
        },
      }));
    }
    const ep = data.epochs;
    const epCanvas = document.getElementById("epochs-chart");
    if (epCanvas && ep.series.length) {
      charts.push(new Chart(epCanvas, {
        type: "line",
        data: {
          labels: ep.labels,
          datasets: ep.series.map((s, i) => ({
            label: s.name, data: s.values, borderColor: PALETTE[i % PALETTE.length],
            backgroundColor: PALETTE[i % PALETTE.length], spanGaps: true, pointRadius: 3,
          })),
        },
        options: {
          animation: false, responsive: true, maintainAspectRatio: false,
          scales: { y: { title: { display: true, text: data.metric || "metric" } } },
          plugins: {
            tooltip: {
              callbacks: {
                footer: (items) => {
                  const m = ep.mb[items[0].dataIndex];
                  return m === null || m === undefined ? "" : `${mb(m)} MB sent`;
                },
              },
            },
          },
        },
      }));
    }
    return data;
  }

  function follow(url, onEvent) {
    const source = new EventSource(url);
    const state = document.getElementById("live-state");
    source.addEventListener("open", () => { if (state) state.textContent = "live"; });
    source.addEventListener("error", () => { if (state) state.textContent = "reconnecting"; });
    source.addEventListener("vf", (e) => onEvent(JSON.parse(e.data)));
    return source;
  }

  /* fetch the page's body again (server-rendered) and swap it in: one request at a time */
  function refresher(url, target, after) {
    let busy = false, again = false;
    async function go() {
      if (busy) { again = true; return; }
      busy = true;
      try {
        const resp = await fetch(url, { credentials: "same-origin" });
        if (resp.ok) {
          const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
          target.replaceChildren(...Array.from(doc.body.childNodes));
          if (after) after();
        }
      } finally {
        busy = false;
        if (again) { again = false; go(); }
      }
    }
    return go;
  }

  function initRun() {
    const data = initRunCharts();
    const body = document.getElementById("run-body");
    if (!body || !data || !data.live) return;
    const id = body.dataset.id;
    const refresh = refresher(`/run/${id}?partial=1`, body, () => {
      const d = initRunCharts();
      body.dataset.updates = String(Number(body.dataset.updates || "0") + 1);
      if (d && !d.live && window.__vfSource) { window.__vfSource.close(); }
    });
    window.__vfSource = follow(`/api/stream?run=${encodeURIComponent(id)}`, () => refresh());
  }

  /* ------------------------------------------------------------------ a comparison */
  function initComparison() {
    const d = readJSON("compare-data");
    const canvas = document.getElementById("compare-chart");
    if (!d || !canvas || typeof Chart === "undefined") return;
    const datasets = d.datasets.map((s) => ({
      label: s.label, method: s.method, seed: s.seed, data: s.points, showLine: s.points.length > 1,
      borderColor: s.colour, backgroundColor: s.colour, pointRadius: s.points.length > 1 ? 2 : 6, borderWidth: 1.5,
    }));
    if (d.target !== null && d.target !== undefined && d.xmin !== null && d.xmin !== undefined) {
      datasets.push({
        label: d.target_label, method: "target", data: [{ x: d.xmin, y: d.target }, { x: d.xmax, y: d.target }],
        showLine: true, borderColor: "#000000", backgroundColor: "#000000", borderDash: [2, 3], pointRadius: 0,
        borderWidth: 1,
      });
      for (const r of d.reach) {
        const own = d.datasets.find((s) => s.method === r.method);
        datasets.push({
          label: `${r.method} reached the target`, method: r.method, reach: true,
          data: [{ x: r.x, y: r.y }], pointStyle: "crossRot", pointRadius: 9, borderWidth: 2,
          borderColor: own ? own.colour : "#000000", backgroundColor: own ? own.colour : "#000000",
        });
      }
    }
    const chart = new Chart(canvas, {
      type: "scatter",
      data: { datasets },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        scales: {
          x: { type: "logarithmic", title: { display: true, text: "MB sent (training traffic, log scale)" } },
          y: { title: { display: true, text: `test ${d.metric}` } },
        },
        plugins: {
          legend: {
            labels: {
              /* one entry per method (its first seed), the target line; not the crosses */
              filter: (item, cd) => {
                const s = cd.datasets[item.datasetIndex];
                if (s.reach) return false;
                return cd.datasets.findIndex((o) => o.method === s.method && !o.reach) === item.datasetIndex;
              },
            },
            onClick: (e, item, legend) => {
              const ch = legend.chart;
              const method = ch.data.datasets[item.datasetIndex].method;
              const hide = ch.isDatasetVisible(item.datasetIndex);
              ch.data.datasets.forEach((s, i) => { if (s.method === method) ch.setDatasetVisibility(i, !hide); });
              ch.update();
            },
          },
          tooltip: {
            callbacks: {
              label: (c) => {
                const p = c.raw;
                if (c.dataset.method === "target") return `${c.dataset.label}`;
                if (c.dataset.reach) return `${c.dataset.method} reached the target at ${mb(p.x)} MB`;
                return `${c.dataset.method}, seed ${p.seed}, ${p.phase} epoch ${p.epoch}: ${d.metric} ${fmt(p.y)} at ${mb(p.x)} MB`;
              },
            },
          },
        },
      },
    });
    charts.push(chart);
  }

  /* ------------------------------------------------------------------ live */
  function initLive() {
    const body = document.getElementById("live-body");
    const refresh = refresher("/live?partial=1", body, () => {
      body.dataset.updates = String(Number(body.dataset.updates || "0") + 1);
      const state = document.getElementById("live-state");
      if (state) state.textContent = "live";
    });
    follow("/api/stream", () => refresh());
  }

  /* ------------------------------------------------------------------ a deployment */
  function initDeployment() {
    const table = document.getElementById("deployment");
    if (!table) return;
    const n = table.dataset.n;
    function set(row, cls, text, ok) {
      const cell = row.querySelector(`td.${cls}`);
      cell.textContent = text;
      if (ok !== undefined) cell.dataset.ok = ok ? "yes" : "no";
    }
    async function poll() {
      try {
        const resp = await fetch(`/api/deployment/status?n=${encodeURIComponent(n)}`, { credentials: "same-origin" });
        if (!resp.ok) return;
        const st = await resp.json();
        for (const p of st.parties) {
          const row = Array.from(table.tBodies[0].rows).find((r) => r.dataset.party === p.name);
          if (!row) continue;
          set(row, "reachable", p.reachable ? (p.error ? `busy: ${p.error}` : `yes (${fmt(p.seconds, 2)} s)`)
                                            : `no: ${p.error}`, p.reachable);
          const pol = p.policy;
          set(row, "policy", pol ? `release_columns ${pol.release_columns}, accept_labels ${pol.accept_labels}, ` +
            `require_secure ${pol.require_secure}, min_key_bits ${pol.min_key_bits}, methods ${pol.methods.join(", ")}` : "");
          const s = p.status;
          set(row, "sessions", s ? `${s.sessions.length} of ${s.max_sessions}` +
            (s.sessions.length ? ": " + s.sessions.map((x) => `${x.id} (since ${x.started}, idle ${x.idle_s} s)`).join("; ") : "") : "");
          set(row, "models", s ? (s.models.length ? s.models.join(", ") : "none") : "");
          set(row, "rows", s ? String(s.rows_in_file) : "");
          set(row, "version", s ? s.version : "");
        }
        const checked = document.getElementById("checked");
        checked.textContent = `Checked ${new Date(st.checked * 1000).toLocaleTimeString()}.`;
        table.dataset.polls = String(Number(table.dataset.polls || "0") + 1);
      } catch (err) {
        /* the board itself stopped: keep the last answer on screen */
      }
    }
    poll();
    setInterval(poll, 5000);
  }

  const init = { runs: initRuns, run: initRun, comparison: initComparison, live: initLive, deployment: initDeployment };
  document.addEventListener("DOMContentLoaded", () => {
    const f = init[document.body.dataset.page];
    if (f) f();
    document.body.dataset.ready = "yes";
  });
})();
