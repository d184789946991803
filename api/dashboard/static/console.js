// sandboxd console: the views beside the overview's numbers (dashboard.js).
// Routes (the URL's hash): #/overview (tiles, tables and the charts of
// /v1/dashboard/series), #/jobs?tenant=&tool=&state=&session=&since=&until=
// (the job list, newest first), #/jobs/ID (one job: arguments, result,
// output, timeline, guard, egress, usage, artifacts, callback; live jobs
// stream their events), #/sessions (open sessions and their last jobs) and
// #/approvals (dashboard.js renders and decides them).
//
// Every request carries the API key the user pasted (sessionStorage); a
// tenant's key sees its tenant, an operator key every tenant. Nothing is
// loaded from outside the server; text from the API is only ever set as
// textContent, never parsed as HTML.
(function () {
  "use strict";

  var KEY_STORE = "sandboxd.apiKey";
  var DASH = "\u2014";
  var CHART_POLL_MS = 5000;
  var LIST_POLL_MS = 3000;
  var COLORS = ["#2f6f4f", "#2563eb", "#b42318", "#b7791f", "#7c3aed", "#0e7490", "#be185d", "#4d7c0f", "#6b7480", "#9a3412"];

  function $(id) { return document.getElementById(id); }

  // ---- API -------------------------------------------------------------

  function apiKey() {
    try { return sessionStorage.getItem(KEY_STORE) || ""; } catch (e) { return ""; }
  }

  function headers(extra) {
    var h = extra || {};
    var k = apiKey();
    if (k) h.Authorization = "Bearer " + k;
    return h;
  }

  // api fetches a JSON document; a non-2xx answer rejects with the server's
  // error message and the status.
  function api(path, opts) {
    opts = opts || {};
    opts.headers = headers(opts.headers);
    opts.cache = "no-store";
    return fetch(path, opts).then(function (resp) {
      if (resp.ok) return resp.json();
      return resp.text().then(function (body) {
        var msg = "";
        try { var j = JSON.parse(body); msg = j && j.error ? j.error.message || j.error.code : ""; } catch (e) { msg = body.slice(0, 200); }
        var err = new Error("HTTP " + resp.status + (msg ? ": " + msg : "") + (resp.status === 401 ? " (paste an API key above)" : ""));
        err.status = resp.status;
        throw err;
      });
    });
  }

  function errText(err) { return err && err.message ? err.message : String(err); }

  // ---- DOM -------------------------------------------------------------

  // el makes an element: props className, text, title, href, data (object);
  // children are nodes or strings.
  function el(tag, props, children) {
    var e = document.createElement(tag);
    props = props || {};
    if (props.className) e.className = props.className;
    if (props.text !== undefined && props.text !== null) e.textContent = String(props.text);
    if (props.title) e.title = props.title;
    if (props.href) e.setAttribute("href", props.href);
    if (props.id) e.id = props.id;
    for (var k in props.data || {}) e.dataset[k] = props.data[k];
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }

  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }

  function msg(id, text, kind) {
    var m = $(id);
    if (!m) return;
    m.textContent = text || "";
    m.dataset.kind = kind || "";
  }

  function fmtTime(s) {
    if (!s) return DASH;
    var d = new Date(s);
    return isNaN(d) ? String(s) : d.toLocaleString();
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return DASH;
    if (ms === 0) return "0 ms";
    if (ms < 1) return ms.toFixed(3) + " ms";
    if (ms < 1000) return ms.toFixed(ms < 10 ? 2 : 0) + " ms";
    if (ms < 120000) return (ms / 1000).toFixed(2) + " s";
    if (ms < 7200000) return (ms / 60000).toFixed(1) + " min";
    return (ms / 3600000).toFixed(1) + " h";
  }

  function fmtBytes(v) {
    if (v === null || v === undefined) return DASH;
    var units = ["B", "KiB", "MiB", "GiB"], i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
  }

  function fmtValue(v, unit) {
    if (v === null || v === undefined || !isFinite(v)) return DASH;
    if (unit === "s") return v === 0 ? "0" : fmtMs(v * 1000);
    var a = Math.abs(v);
    var s = a === 0 ? "0" : a >= 100 ? v.toFixed(0) : a >= 1 ? v.toFixed(2) : v.toPrecision(3);
    return s + (unit === "/s" ? "/s" : "");
  }

  function jobDurationMs(j) {
    if (!j.started_at) return null;
    var end = j.finished_at ? new Date(j.finished_at) : new Date();
    return end - new Date(j.started_at);
  }

  function jobLink(id) { return el("a", { href: "#/jobs/" + encodeURIComponent(id), text: id, className: "mono" }); }

  function stateBadge(state) { return el("span", { className: "state s-" + state, text: state, data: { state: state } }); }

  function pre(text, cls) { return el("pre", { className: cls || "", text: text === undefined || text === null ? "" : text }); }

  function json(v) {
    try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
  }

  // kv is a two-column table of [label, value] rows (value: text or node).
  function kv(rows, id) {
    var t = el("table", { className: "kv", id: id });
    var body = el("tbody");
    rows.forEach(function (r) {
      if (!r) return;
      var v = r[1];
      var data = r[2] || {};
      data.key = r[0];
      body.appendChild(el("tr", { data: data }, [el("th", { text: r[0] }), el("td", {}, [v instanceof Node ? v : document.createTextNode(v === undefined || v === null || v === "" ? DASH : String(v))])]));
    });
    t.appendChild(body);
    return t;
  }

  function table(id, head, rows) {
    var t = el("table", { id: id });
    t.appendChild(el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", { text: h }); }))]));
    var body = el("tbody");
    rows.forEach(function (r) { body.appendChild(r); });
    t.appendChild(body);
    return t;
  }

  function section(title, id, children) {
    return el("section", { className: "sub-panel", id: id }, [el("h3", { text: title })].concat(children));
  }

  // ---- router ------------------------------------------------------------

  var current = { view: "", stop: null };

  function parseHash() {
    var h = location.hash.replace(/^#\/?/, "");
    var q = "";
    var i = h.indexOf("?");
    if (i >= 0) { q = h.slice(i + 1); h = h.slice(0, i); }
    var parts = h.split("/").filter(Boolean).map(decodeURIComponent);
    return { parts: parts, query: new URLSearchParams(q) };
  }

  function show(view) {
    Array.prototype.forEach.call(document.querySelectorAll(".view"), function (v) { v.hidden = v.dataset.view !== view; });
    Array.prototype.forEach.call(document.querySelectorAll("#nav a"), function (a) {
      a.classList.toggle("active", a.dataset.view === view || (view === "job" && a.dataset.view === "jobs"));
    });
    document.body.dataset.view = view;
  }

  function route() {
    if (current.stop) { try { current.stop(); } catch (e) { /* ignore */ } }
    current.stop = null;
    var h = parseHash();
    var first = h.parts[0] || "overview";
    try {
      if (first === "jobs" && h.parts[1]) { show("job"); current.stop = jobView(h.parts[1]); }
      else if (first === "jobs") { show("jobs"); current.stop = jobsView(h.query); }
      else if (first === "sessions") { show("sessions"); current.stop = sessionsView(); }
      else if (first === "approvals") { show("approvals"); }
      else { show("overview"); current.stop = chartsView(); }
    } catch (err) {
      msg("job-msg", "console: " + errText(err), "error");
    }
  }

  // poller runs fn now and every ms until stopped; fn returns a promise.
  function poller(fn, ms) {
    var stopped = false, timer = null;
    var tick = function () {
      if (stopped) return;
      Promise.resolve().then(fn).catch(function () { /* fn shows its errors */ }).then(function () {
        if (!stopped) timer = setTimeout(tick, ms);
      });
    };
    tick();
    return function () { stopped = true; if (timer) clearTimeout(timer); };
  }

  // ---- overview charts ---------------------------------------------------

  var chartWindow = "1h";
  var replicas = new Map(); // replica -> {at, data}
  var chosenReplica = "";
  var plots = new Map(); // chart id -> {plot, names}

  function chartsView() {
    return poller(loadCharts, CHART_POLL_MS);
  }

  function loadCharts() {
    if (!window.uPlot) { msg("charts-msg", "uPlot did not load", "error"); return Promise.resolve(); }
    return api("/v1/dashboard/series?window=" + encodeURIComponent(chartWindow)).then(function (d) {
      replicas.set(d.replica, { at: Date.now(), data: d });
      replicas.forEach(function (v, k) { if (Date.now() - v.at > 120000 && k !== d.replica) replicas.delete(k); });
      if (!chosenReplica || !replicas.has(chosenReplica)) chosenReplica = d.replica;
      renderReplicas();
      renderCharts(replicas.get(chosenReplica).data);
      msg("charts-msg", "");
    }).catch(function (err) {
      msg("charts-msg", "charts: " + errText(err), "error");
      if (err.status === 401) { replicas.clear(); renderReplicas(); clearCharts(); }
    });
  }

  function renderReplicas() {
    var sel = $("replica");
    var names = Array.from(replicas.keys()).sort();
    if (sel.dataset.names !== names.join("\n")) {
      clear(sel);
      names.forEach(function (n) { var o = el("option", { text: n }); o.value = n; sel.appendChild(o); });
      sel.dataset.names = names.join("\n");
    }
    sel.value = chosenReplica;
    sel.disabled = names.length < 2;
  }

  function clearCharts() {
    plots.forEach(function (p) { p.plot.destroy(); });
    plots.clear();
    clear($("charts"));
    $("charts").dataset.sampledAt = "";
  }

  function renderCharts(d) {
    var box = $("charts");
    var last = d.times.length ? d.times[d.times.length - 1] : 0;
    box.dataset.sampledAt = String(last);
    box.dataset.firstAt = String(d.times.length ? d.times[0] : 0);
    box.dataset.replica = d.replica;
    box.dataset.window = String(d.window_seconds);
    $("charts-note").textContent = "replica " + d.replica + " · " + d.scope + " · a point every " + fmtMs(d.step_seconds * 1000) +
      (d.sampled_since ? " · since " + fmtTime(d.sampled_since) : "") + (d.dropped_series ? " · " + d.dropped_series + " series not kept" : "");
    var seen = new Set();
    d.charts.forEach(function (c) {
      seen.add(c.id);
      var card = $("chart-" + c.id);
      if (!card) {
        card = el("div", { className: "chart", id: "chart-" + c.id, data: { chart: c.id } }, [
          el("h3", { text: c.title }), el("div", { className: "plot" }), el("table", { className: "legend" }, [el("tbody")])
        ]);
        box.appendChild(card);
      }
      var names = c.series.map(function (s) { return s.name; });
      var p = plots.get(c.id);
      var data = [d.times].concat(c.series.map(function (s) { return s.values; }));
      var width = Math.max(260, card.clientWidth - 16);
      if (!p || p.names.join("\n") !== names.join("\n")) {
        if (p) p.plot.destroy();
        var plotBox = clear(card.querySelector(".plot"));
        var opts = {
          width: width, height: 170, legend: { show: false }, cursor: { drag: { x: false, y: false } },
          scales: { x: { time: true }, y: { range: function (u, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } } },
          axes: [{ stroke: "#6b7480", grid: { stroke: "#eef0f3" } },
            { stroke: "#6b7480", grid: { stroke: "#eef0f3" }, size: 60, values: function (u, vals) { return vals.map(function (v) { return fmtValue(v, c.unit); }); } }],
          series: [{}].concat(c.series.map(function (s, i) {
            // Latencies exist only where a job ended: draw the points,
            // which stand alone between gaps.
            return { label: s.name, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
              points: { show: c.unit === "s", size: 5, fill: COLORS[i % COLORS.length] } };
          }))
        };
        p = { plot: new window.uPlot(opts, data, plotBox), names: names };
        plots.set(c.id, p);
      } else {
        p.plot.setData(data);
        if (Math.abs(p.plot.width - width) > 4) p.plot.setSize({ width: width, height: 170 });
      }
      // The legend: each series' last value and its maximum in the window,
      // the exact numbers in data-value for copy and tests.
      var body = clear(card.querySelector(".legend tbody"));
      if (c.series.length === 0) body.appendChild(el("tr", {}, [el("td", { className: "empty", text: "no data yet for this key" })]));
      c.series.forEach(function (s, i) {
        // "now" is the value at the newest point (none: no job ended in
        // that step, for a latency), "max" the highest in the window.
        var lastV = s.values.length ? s.values[s.values.length - 1] : null, maxV = null;
        s.values.forEach(function (v) { if (v !== null && (maxV === null || v > maxV)) maxV = v; });
        var sw = el("span", { className: "swatch" });
        sw.style.background = COLORS[i % COLORS.length];
        var lastCell = el("td", { className: "num", text: "now " + fmtValue(lastV, c.unit), data: { value: lastV === null ? "" : String(lastV), what: "last" } });
        var maxCell = el("td", { className: "num", text: "max " + fmtValue(maxV, c.unit), data: { value: maxV === null ? "" : String(maxV), what: "max" } });
        body.appendChild(el("tr", { data: { series: s.name } }, [el("td", {}, [sw, s.name]), lastCell, maxCell]));
      });
    });
    plots.forEach(function (p, id) {
      if (!seen.has(id)) { p.plot.destroy(); plots.delete(id); var c = $("chart-" + id); if (c) c.remove(); }
    });
    document.body.dataset.chartsLoaded = String(Number(document.body.dataset.chartsLoaded || 0) + 1);
  }

  function setupCharts() {
    Array.prototype.forEach.call(document.querySelectorAll("#windows button"), function (b) {
      b.classList.toggle("active", b.dataset.window === chartWindow);
      b.addEventListener("click", function () {
        chartWindow = b.dataset.window;
        Array.prototype.forEach.call(document.querySelectorAll("#windows button"), function (o) { o.classList.toggle("active", o === b); });
        replicas.clear();
        loadCharts();
      });
    });
    $("replica").addEventListener("change", function () {
      chosenReplica = $("replica").value;
      if (replicas.has(chosenReplica)) renderCharts(replicas.get(chosenReplica).data);
    });
  }

  // ---- jobs list ---------------------------------------------------------

  var FILTERS = ["tenant", "tool", "state", "session", "tag", "since", "until"];

  // labelsNode shows a record's tags (each a link to the jobs carrying
  // it) and metadata (key=value, each a link to its filter).
  function labelsNode(tags, md) {
    var box = el("span", { className: "labels" });
    (tags || []).forEach(function (t) {
      box.appendChild(el("a", { className: "tag", href: "#/jobs?tag=" + encodeURIComponent(t), text: t, data: { tag: t } }));
    });
    Object.keys(md || {}).sort().forEach(function (k) {
      box.appendChild(el("a", { className: "tag meta", href: "#/jobs?" + new URLSearchParams([["metadata." + k, md[k]]]).toString(),
        text: k + "=" + md[k], data: { metaKey: k } }));
    });
    return box;
  }

  // metaFilter reads the metadata field: "k=v k2=v2" to [[k, v], ...].
  function metaFilter(text) {
    return text.split(/\s+/).filter(Boolean).map(function (kv) {
      var i = kv.indexOf("=");
      return i > 0 ? [kv.slice(0, i), kv.slice(i + 1)] : null;
    }).filter(Boolean);
  }

  // toLocalInput and fromLocalInput convert between RFC 3339 and the
  // datetime-local field (the browser's time zone).
  function toLocalInput(s) {
    var d = new Date(s);
    if (isNaN(d)) return "";
    var pad = function (n) { return String(n).padStart(2, "0"); };
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  function fromLocalInput(v) {
    if (!v) return "";
    var d = new Date(v);
    return isNaN(d) ? "" : d.toISOString();
  }

  function jobsView(query) {
    FILTERS.forEach(function (f) {
      var v = query.get(f) || "";
      $("f-" + f).value = (f === "since" || f === "until") ? toLocalInput(v) : v;
    });
    var metas = [];
    query.forEach(function (v, k) { if (k.indexOf("metadata.") === 0) metas.push([k.slice(9), v]); });
    $("f-metadata").value = metas.map(function (m) { return m[0] + "=" + m[1]; }).join(" ");
    $("f-tenant").parentNode.hidden = !/^operator/.test(document.body.dataset.scope || "");
    var cursor = "", extra = false;
    var params = new URLSearchParams();
    FILTERS.forEach(function (f) { if (query.get(f)) params.set(f, query.get(f)); });
    metas.forEach(function (m) { params.set("metadata." + m[0], m[1]); });
    var body = $("job-list").tBodies[0];
    var load = function (append) {
      var p = new URLSearchParams(params);
      p.set("limit", "50");
      if (append && cursor) p.set("cursor", cursor);
      return api("/v1/jobs?" + p.toString()).then(function (d) {
        $("f-tenant").parentNode.hidden = !/^operator/.test(document.body.dataset.scope || "");
        if (!append) clear(body);
        (d.jobs || []).forEach(function (j) { body.appendChild(jobRow(j)); });
        cursor = d.next_cursor || "";
        $("jobs-more").hidden = !cursor;
        $("job-list-empty").hidden = body.rows.length !== 0;
        $("job-list").dataset.loaded = String(Number($("job-list").dataset.loaded || 0) + 1);
        msg("jobs-msg", "");
      }).catch(function (err) { msg("jobs-msg", "jobs: " + errText(err), "error"); });
    };
    $("jobs-more").onclick = function () { extra = true; load(true); };
    // Live: the first page refreshes while nobody paged further.
    return poller(function () { return extra ? Promise.resolve() : load(false); }, LIST_POLL_MS);
  }

  function jobRow(j) {
    var tr = el("tr", { data: { jobId: j.id, state: j.state, tool: j.tool, tenant: j.tenant } }, [
      el("td", { text: fmtTime(j.created_at), data: { value: j.created_at } }),
      el("td", {}, [jobLink(j.id)]),
      el("td", { text: j.tenant }),
      el("td", { text: j.tool }),
      el("td", {}, [stateBadge(j.state)]),
      el("td", { text: j.reason || "" }),
      el("td", {}, [j.session_id ? el("a", { href: "#/jobs?session=" + encodeURIComponent(j.session_id), text: j.session_id, className: "mono" }) : ""]),
      el("td", { className: "labels-cell" }, [labelsNode(j.tags, j.metadata)]),
      el("td", { className: "num", text: fmtMs(jobDurationMs(j)) })
    ]);
    tr.className = "clickable";
    tr.addEventListener("click", function (ev) {
      if (ev.target.tagName !== "A") location.hash = "#/jobs/" + encodeURIComponent(j.id);
    });
    return tr;
  }

  function setupJobFilter() {
    $("job-filter").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var p = new URLSearchParams();
      FILTERS.forEach(function (f) {
        var v = $("f-" + f).value.trim();
        if (f === "since" || f === "until") v = fromLocalInput(v);
        if (v) p.set(f, v);
      });
      metaFilter($("f-metadata").value).forEach(function (m) { p.set("metadata." + m[0], m[1]); });
      var h = "#/jobs" + (p.toString() ? "?" + p.toString() : "");
      if (location.hash === h) route(); else location.hash = h;
    });
    $("f-reset").addEventListener("click", function () { location.hash = "#/jobs"; });
  }

  // ---- one job -------------------------------------------------------------

  function jobView(id) {
    var stopped = false, abort = null, urls = [];
    var box = clear($("job-detail"));
    msg("job-msg", "loading " + id + "…");
    var render = function () {
      return Promise.all([api("/v1/jobs/" + encodeURIComponent(id)), api("/v1/jobs/" + encodeURIComponent(id) + "/timeline")]).then(function (r) {
        if (stopped) return;
        var j = r[0], tl = r[1];
        urls.forEach(function (u) { URL.revokeObjectURL(u); });
        urls = [];
        clear(box);
        renderJob(box, j, tl, urls);
        msg("job-msg", "");
        document.body.dataset.jobLoaded = j.id + ":" + j.state;
        var terminal = j.state === "succeeded" || j.state === "failed" || j.state === "cancelled";
        if (!terminal && !abort) stream(j);
      }).catch(function (err) { if (!stopped) msg("job-msg", errText(err), "error"); });
    };
    // stream follows a live job's events: output is appended as it
    // arrives, a lifecycle event reloads the page's record.
    var stream = function (j) {
      abort = new AbortController();
      $("job-live").hidden = false;
      fetch("/v1/jobs/" + encodeURIComponent(j.id) + "/events", { headers: headers(), signal: abort.signal, cache: "no-store" }).then(function (resp) {
        if (!resp.ok || !resp.body) throw new Error("events: HTTP " + resp.status);
        var reader = resp.body.getReader(), dec = new TextDecoder(), buf = "";
        var pump = function () {
          return reader.read().then(function (r) {
            if (r.done || stopped) return;
            buf += dec.decode(r.value, { stream: true });
            var i;
            while ((i = buf.indexOf("\n\n")) >= 0) {
              var frame = buf.slice(0, i);
              buf = buf.slice(i + 2);
              onFrame(frame);
            }
            return pump();
          });
        };
        return pump();
      }).catch(function (err) {
        if (!stopped && err.name !== "AbortError") msg("job-msg", "live: " + errText(err), "error");
      }).then(function () {
        abort = null;
        if (!stopped) render();
      });
    };
    var onFrame = function (frame) {
      var data = "";
      frame.split("\n").forEach(function (line) { if (line.indexOf("data: ") === 0) data += line.slice(6); });
      if (!data) return;
      var ev;
      try { ev = JSON.parse(data); } catch (e) { return; }
      if (ev.type === "stdout" || ev.type === "stderr") {
        var out = $("job-live-" + ev.type);
        if (out) out.textContent += ev.data || "";
        var n = $("job-live-count");
        if (n) n.textContent = String(Number(n.textContent || 0) + 1);
      } else if (ev.type !== "finished" && ev.job) {
        var badge = document.querySelector("#job-summary .state");
        if (badge) { badge.textContent = ev.job.state; badge.dataset.state = ev.job.state; badge.className = "state s-" + ev.job.state; }
      }
    };
    render();
    return function () {
      stopped = true;
      if (abort) abort.abort();
      urls.forEach(function (u) { URL.revokeObjectURL(u); });
    };
  }

  function renderJob(box, j, tl, urls) {
    var res = j.result || null;
    box.dataset.jobId = j.id;
    box.appendChild(el("h2", { text: j.tool + " · " + j.id }));
    box.appendChild(kv([
      ["state", stateBadge(j.state)],
      ["reason", j.reason],
      ["tenant", j.tenant],
      ["session", j.session_id ? el("a", { href: "#/jobs?session=" + encodeURIComponent(j.session_id), text: j.session_id }) : ""],
      ["runner", j.runner],
      ["call id", j.call_id],
      ["created", fmtTime(j.created_at)],
      ["started", fmtTime(j.started_at)],
      ["finished", fmtTime(j.finished_at)],
      ["attempts", String(j.attempts)],
      ["tags", labelsNode(j.tags, null)],
      ["metadata", labelsNode(null, j.metadata)],
      j.cached ? ["cached", "answered from the result cache: nothing ran, no budget spent"] : null,
      (j.hooks || []).length ? ["hooks", (j.hooks || []).map(function (h) {
        return h.phase + " " + h.outcome + (h.reason ? " (" + h.reason + ")" : "") + (h.error ? " (" + h.error + ")" : "") + " " + h.duration_ms + " ms";
      }).join("; ")] : null
    ], "job-summary"));

    // Live output, shown while the job runs (stream fills it).
    box.appendChild(el("section", { className: "sub-panel live", id: "job-live" }, [
      el("h3", {}, ["Live output ", el("small", {}, ["chunks ", el("span", { id: "job-live-count", text: "0" })])]),
      el("h4", { text: "stdout" }), pre("", "out"), el("h4", { text: "stderr" }), pre("", "out err")
    ]));
    var live = $("job-live");
    live.hidden = true;
    var outs = live.querySelectorAll("pre");
    outs[0].id = "job-live-stdout";
    outs[1].id = "job-live-stderr";

    var grid = el("div", { className: "job-grid" });
    box.appendChild(grid);
    grid.appendChild(section("Arguments", "job-arguments", [pre(json(j.arguments))]));

    var modelSaw = [];
    if (!res) modelSaw.push(el("p", { className: "empty", text: "no result yet" }));
    else {
      modelSaw.push(kv([["ok", String(res.ok)], res.truncated ? ["truncated", "yes"] : null]));
      modelSaw.push(el("h4", { text: "content" }), pre(res.content, "content"));
      if (res.error) modelSaw.push(el("h4", { text: "error" }), pre(res.error, "error"));
    }
    grid.appendChild(section("Result as the model saw it", "job-result", modelSaw));

    var proc = res && res.process;
    grid.appendChild(section("stdout / stderr", "job-output", proc ? [
      kv([["exit code", String(proc.exit_code)], proc.signal ? ["signal", proc.signal] : null, proc.oom_killed ? ["OOM killed", "yes"] : null, proc.fork_loop ? ["fork loop", "killed"] : null,
        proc.timed_out ? ["timed out", "yes"] : null, proc.output_truncated ? ["output truncated", "yes"] : null]),
      el("h4", { text: "stdout" }), pre(proc.stdout, "out stdout"),
      el("h4", { text: "stderr" }), pre(proc.stderr, "out err stderr")
    ] : [el("p", { className: "empty", text: "no process (an in-process tool, or not run)" })]));

    // Timeline from the persisted events.
    var t0 = tl.entries.length ? new Date(tl.entries[0].time) : null;
    grid.appendChild(section("Timeline", "job-timeline", [
      kv([["queued", fmtMs(tl.queued_ms)], ["ran", fmtMs(tl.run_ms)], ["total", fmtMs(tl.total_ms)], tl.truncated ? ["truncated", "more events than shown"] : null]),
      table("timeline", ["event", "at", "duration", "details"], tl.entries.map(function (e) {
        var details = e.type === "output" ? e.chunks + " chunks · stdout " + fmtBytes(e.stdout_bytes || 0) + " · stderr " + fmtBytes(e.stderr_bytes || 0) : "seq " + e.seq;
        return el("tr", { data: { type: e.type, seq: String(e.seq), durationMs: String(e.duration_ms) } }, [
          el("td", { text: e.type }), el("td", { text: "+" + fmtMs(new Date(e.time) - t0) }),
          el("td", { className: "num", text: fmtMs(e.duration_ms) }), el("td", { text: details })]);
      }))
    ]));

    var g = j.guard;
    grid.appendChild(section("Guard decision", "job-guard", g ? [
      kv([["outcome", g.outcome, { value: g.outcome }], ["code", g.code], ["rule", g.rule, { value: g.rule }], ["reason", g.reason], ["refunded", String(!!g.refunded)], ["decided", fmtTime(g.decided_at)]]),
      table("guard-remaining", ["rule", "effect / tool", "scope", "remaining", "limit", "resets"], (g.remaining || []).map(function (r) {
        return el("tr", { data: { rule: r.rule } }, [el("td", { text: r.rule }), el("td", { text: r.effect || r.tool || "" }), el("td", { text: r.scope }),
          el("td", { className: "num", text: String(r.remaining), data: { value: String(r.remaining) } }), el("td", { className: "num", text: String(r.limit) }), el("td", { text: fmtTime(r.resets_at) })]);
      }))
    ] : [el("p", { className: "empty", text: "no policy: the guard allowed it without a rule" })]));

    grid.appendChild(section("Egress audit", "job-egress", (j.egress && j.egress.length) ? [
      table("egress-audit", ["time", "method", "host", "port", "address", "decision", "rule", "reason", "out", "in"], j.egress.map(function (e) {
        return el("tr", { data: { allowed: String(e.allowed) } }, [el("td", { text: fmtTime(e.time) }), el("td", { text: e.method }), el("td", { text: e.host }),
          el("td", { text: String(e.port) }), el("td", { text: e.ip || "" }), el("td", { className: e.allowed ? "good" : "bad", text: e.allowed ? "allowed" : "denied" }),
          el("td", { text: e.rule >= 0 ? "allow[" + e.rule + "]" : DASH }), el("td", { text: e.reason || "" }),
          el("td", { className: "num", text: fmtBytes(e.bytes_out) }), el("td", { className: "num", text: fmtBytes(e.bytes_in) })]);
      }))
    ] : [el("p", { className: "empty", text: "no outbound connections" })]));

    var u = res ? res.usage || {} : null;
    grid.appendChild(section("Usage", "job-usage", u ? [kv([
      ["wall", fmtMs(u.wall_ms), { value: String(u.wall_ms || 0) }], ["cpu", u.cpu_ms !== undefined ? fmtMs(u.cpu_ms) : DASH],
      ["peak memory", u.peak_memory_bytes !== undefined ? fmtBytes(u.peak_memory_bytes) : DASH],
      ["bytes in / out", (u.bytes_in || u.bytes_out) ? fmtBytes(u.bytes_in || 0) + " / " + fmtBytes(u.bytes_out || 0) : DASH],
      ["effects", (res.effects || []).join(", ")],
      ["limits", Object.keys(j.limits || {}).map(function (k) { return k + " " + j.limits[k]; }).join(" · ")]
    ])] : [el("p", { className: "empty", text: "no result yet" })]));

    var arts = (res && res.artifacts) || [];
    var artBox = [];
    if (!arts.length) artBox.push(el("p", { className: "empty", text: "no artifacts" }));
    arts.forEach(function (a) {
      var url = a.url || "/v1/jobs/" + encodeURIComponent(j.id) + "/artifacts/" + encodeURIComponent(a.name);
      var item = el("div", { className: "artifact", data: { name: a.name, mime: a.mime_type } }, [
        el("div", {}, [el("strong", { text: a.name }), " " + a.mime_type + " · " + fmtBytes(a.size) + " "])
      ]);
      var dl = el("button", { text: "Download", className: "download" });
      dl.type = "button";
      item.firstChild.appendChild(dl);
      var note = el("span", { className: "msg" });
      item.firstChild.appendChild(note);
      var blob = function () {
        return fetch(url, { headers: headers(), cache: "no-store" }).then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.blob();
        });
      };
      dl.addEventListener("click", function () {
        blob().then(function (b) {
          var href = URL.createObjectURL(b);
          urls.push(href);
          var a2 = el("a", { href: href });
          a2.download = a.name;
          document.body.appendChild(a2);
          a2.click();
          a2.remove();
          note.textContent = "downloaded";
        }).catch(function (err) { note.textContent = errText(err); });
      });
      if (a.mime_type === "image/png") {
        var img = el("img", { className: "preview" });
        img.alt = a.name;
        item.appendChild(img);
        blob().then(function (b) {
          var href = URL.createObjectURL(b);
          urls.push(href);
          img.addEventListener("load", function () { img.dataset.loaded = String(img.naturalWidth) + "x" + String(img.naturalHeight); });
          img.src = href;
        }).catch(function (err) { note.textContent = "preview: " + errText(err); });
      }
      artBox.push(item);
    });
    grid.appendChild(section("Artifacts", "job-artifacts", artBox));

    var cb = j.callback;
    grid.appendChild(section("Completion callback", "job-callback", cb ? [
      kv([["url", cb.url], ["state", cb.state, { value: cb.state }]]),
      table("callback-attempts", ["at", "status", "took", "error"], (cb.attempts || []).map(function (a) {
        return el("tr", {}, [el("td", { text: fmtTime(a.at) }), el("td", { text: a.status ? String(a.status) : DASH }),
          el("td", { className: "num", text: fmtMs(a.duration_ms) }), el("td", { text: a.error || "" })]);
      }))
    ] : [el("p", { className: "empty", text: "no callback_url" })]));
  }

  // ---- sessions ------------------------------------------------------------

  function fmtAge(from) {
    if (!from) return DASH;
    return fmtMs(Date.now() - new Date(from));
  }

  function sessionsView() {
    var body = $("session-list").tBodies[0];
    var load = function () {
      return api("/v1/sessions?state=active&limit=200").then(function (d) {
        var list = d.sessions || [];
        return Promise.all(list.map(function (s) {
          return api("/v1/jobs?session=" + encodeURIComponent(s.id) + "&limit=3").then(function (r) { return r.jobs || []; }, function () { return null; });
        })).then(function (lasts) {
          clear(body);
          list.forEach(function (s, i) {
            var jobs = lasts[i];
            var cell = el("td", { className: "last-jobs" });
            if (jobs === null) cell.textContent = DASH;
            else if (!jobs.length) cell.textContent = "none yet";
            (jobs || []).forEach(function (j) {
              cell.appendChild(el("div", { data: { jobId: j.id } }, [jobLink(j.id), " " + j.tool + " ", stateBadge(j.state)]));
            });
            body.appendChild(el("tr", { data: { sessionId: s.id, tenant: s.tenant } }, [
              el("td", {}, [el("a", { href: "#/jobs?session=" + encodeURIComponent(s.id), text: s.id, className: "mono" })]),
              el("td", { text: s.tenant }),
              el("td", { className: "mono", text: s.sandbox || DASH, title: s.sandbox ? "" : "held by another replica, or not created yet" }),
              el("td", { text: s.image || "default" }),
              el("td", { text: (s.effects || []).join(", ") }),
              el("td", { className: "labels-cell" }, [labelsNode(s.tags, s.metadata)]),
              el("td", { className: "num", text: fmtAge(s.created_at) }),
              el("td", { className: "num", text: fmtAge(s.last_used_at) }),
              el("td", { text: fmtTime(s.expires_at) }),
              cell
            ]));
          });
          $("session-list-empty").hidden = list.length !== 0;
          $("sessions-note").textContent = list.length + " open";
          $("session-list").dataset.loaded = String(Number($("session-list").dataset.loaded || 0) + 1);
          msg("sessions-msg", "");
        });
      }).catch(function (err) { msg("sessions-msg", "sessions: " + errText(err), "error"); });
    };
    return poller(load, LIST_POLL_MS);
  }

  // ---- start ---------------------------------------------------------------

  function start() {
    setupCharts();
    setupJobFilter();
    window.addEventListener("hashchange", route);
    // A new key: the current view reloads with it.
    $("key-form").addEventListener("submit", function () { replicas.clear(); clearCharts(); setTimeout(route, 0); });
    $("key-clear").addEventListener("click", function () { replicas.clear(); clearCharts(); setTimeout(route, 0); });
    route();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
