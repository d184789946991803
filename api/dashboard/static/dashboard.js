// sandboxd dashboard: polls /v1/dashboard (the sandboxd_* metrics scoped to
// the API key the user pastes) every 2 s, renders tiles, tables and
// sparklines from it, and lists pending approvals with Approve/Deny buttons.
// Without a key the server answers 401 and the page shows nothing.
// Every error is shown in the page; nothing is thrown out of a callback.
(function () {
  "use strict";

  var P = window.SandboxdProm;
  var POLL_MS = 2000;
  var HISTORY = 60; // scrapes kept: 2 minutes at 2 s
  var KEY_STORE = "sandboxd.apiKey";
  var SVG_NS = "http://www.w3.org/2000/svg"; // the SVG namespace name, not a fetched URL
  var DASH = "\u2014";

  // history holds the last HISTORY scrapes: {t: ms, p: parsed}.
  var history = [];

  function $(id) { return document.getElementById(id); }

  // ---- formatting ----------------------------------------------------

  function fmtNum(v) {
    if (v === null || v === undefined) return DASH;
    if (!isFinite(v)) return String(v);
    if (Number.isInteger(v)) return String(v);
    if (Math.abs(v) >= 100) return v.toFixed(0);
    if (Math.abs(v) >= 1) return v.toFixed(2);
    return v.toPrecision(3);
  }

  function fmtRate(v) {
    if (v === null || v === undefined || !isFinite(v)) return DASH;
    if (v === 0) return "0";
    if (v >= 100) return v.toFixed(0);
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined || !isFinite(s)) return DASH;
    if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 1) + " ms";
    if (s < 120) return s.toFixed(2) + " s";
    return (s / 60).toFixed(1) + " min";
  }

  function fmtBytes(v) {
    if (v === null || v === undefined) return DASH;
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
  }

  // setValue writes a metric value into el: the text and a data-value
  // attribute with the exact number ("" when absent), for tests and copy.
  function setValue(el, v, fmt) {
    if (!el) return;
    el.textContent = (fmt || fmtNum)(v);
    el.dataset.value = v === null || v === undefined ? "" : String(v);
    el.classList.toggle("absent", v === null || v === undefined);
  }

  // ---- rates from successive scrapes ---------------------------------

  // series returns [{t, v}] of a value computed from every kept scrape.
  function series(fn) {
    var out = [];
    for (var i = 0; i < history.length; i++) {
      var v = fn(history[i].p);
      out.push({ t: history[i].t, v: v });
    }
    return out;
  }

  // rates turns a cumulative counter series into per-second rates between
  // neighbours; a value going down is a counter reset.
  function rates(s) {
    var out = [];
    for (var i = 1; i < s.length; i++) {
      var a = s[i - 1], b = s[i];
      if (b.v === null) { out.push(null); continue; }
      var dt = (b.t - a.t) / 1000;
      if (!(dt > 0)) continue;
      var prev = a.v === null ? 0 : a.v;
      var d = b.v >= prev ? b.v - prev : b.v;
      out.push(d / dt);
    }
    return out;
  }

  function lastRate(fn) {
    if (history.length < 2) return null;
    var r = rates(series(fn).slice(-2));
    return r.length ? r[r.length - 1] : null;
  }

  // ---- SVG -----------------------------------------------------------

  function svgEl(name, attrs) {
    var e = document.createElementNS(SVG_NS, name);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    return e;
  }

  function sparkline(values, w, h) {
    w = w || 120; h = h || 28;
    var svg = svgEl("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, "class": "sparkline", role: "img" });
    var pts = [];
    var max = 0;
    values.forEach(function (v) { if (v !== null && isFinite(v) && v > max) max = v; });
    if (values.length === 1) values = [values[0], values[0]];
    if (values.length === 0) values = [0, 0];
    var n = values.length;
    values.forEach(function (v, i) {
      var x = (i / (n - 1)) * (w - 2) + 1;
      var y = h - 2 - (max > 0 && v !== null ? (v / max) * (h - 4) : 0);
      pts.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    svg.appendChild(svgEl("polyline", { points: pts.join(" "), fill: "none", "stroke-width": 1.5, "class": "line" }));
    var title = svgEl("title", {});
    title.textContent = "max " + fmtRate(max) + "/s over " + n + " intervals";
    svg.appendChild(title);
    return svg;
  }

  function bar(fraction, w, h) {
    w = w || 120; h = h || 10;
    var f = isFinite(fraction) ? Math.max(0, Math.min(1, fraction)) : 0;
    var svg = svgEl("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, "class": "bar", role: "img" });
    svg.appendChild(svgEl("rect", { x: 0, y: 0, width: w, height: h, rx: 2, "class": "bar-bg" }));
    svg.appendChild(svgEl("rect", { x: 0, y: 0, width: (f * w).toFixed(1), height: h, rx: 2, "class": f < 0.2 ? "bar-fg low" : "bar-fg" }));
    return svg;
  }

  function replaceChildren(el, child) {
    while (el.firstChild) el.removeChild(el.firstChild);
    if (child) el.appendChild(child);
  }

  // ---- tables ----------------------------------------------------------

  function td(text, cls) {
    var c = document.createElement("td");
    if (cls) c.className = cls;
    if (text instanceof Node) c.appendChild(text);
    else c.textContent = text;
    return c;
  }

  function numCell(v, fmt, attrs) {
    var c = document.createElement("td");
    c.className = "num";
    setValue(c, v, fmt);
    for (var k in attrs || {}) c.dataset[k] = attrs[k];
    return c;
  }

  // fillTable replaces the rows of table id's tbody; rows are arrays of
  // cells. The sibling "<id>-empty" paragraph shows when there are none.
  function fillTable(id, rows, emptyText) {
    var table = $(id), body = table.tBodies[0];
    while (body.firstChild) body.removeChild(body.firstChild);
    rows.forEach(function (cells) {
      var tr = document.createElement("tr");
      cells.forEach(function (c) { tr.appendChild(c); });
      body.appendChild(tr);
    });
    table.hidden = rows.length === 0;
    var empty = $(id + "-empty");
    if (empty) {
      empty.hidden = rows.length !== 0;
      empty.textContent = emptyText || DASH;
    }
  }

  function sortedGroups(map) {
    var arr = [];
    map.forEach(function (g, k) { arr.push({ key: k, labels: g.labels, value: g.value, buckets: g.buckets }); });
    arr.sort(function (a, b) { return a.key < b.key ? -1 : a.key > b.key ? 1 : 0; });
    return arr;
  }

  // ---- render ----------------------------------------------------------

  function render(p) {
    var absent = function (name) { return !P.has(p, name); };

    // Tiles.
    var jobsRate = lastRate(function (q) { return P.sum(q, "sandboxd_jobs_total"); });
    setValue($("t-jobs-rate"), absent("sandboxd_jobs_total") ? null : jobsRate, fmtRate);
    replaceChildren($("s-jobs-rate"), absent("sandboxd_jobs_total") ? null : sparkline(rates(series(function (q) { return P.sum(q, "sandboxd_jobs_total"); }))));
    setValue($("t-inflight"), P.sum(p, "sandboxd_jobs_in_flight"));
    replaceChildren($("s-inflight"), absent("sandboxd_jobs_in_flight") ? null : sparkline(series(function (q) { return P.sum(q, "sandboxd_jobs_in_flight"); }).map(function (x) { return x.v; })));
    setValue($("t-queue"), P.sum(p, "sandboxd_queue_depth"));
    var rejected = P.sum(p, "sandboxd_queue_rejected_total");
    $("t-queue-rejected").textContent = rejected === null ? "" : "rejected " + fmtNum(rejected);
    setValue($("t-sandboxes"), P.sum(p, "sandboxd_sandboxes_alive"));
    var pool = P.sum(p, "sandboxd_pool_ready");
    $("t-pool").textContent = "pool ready " + fmtNum(pool);
    $("t-pool").dataset.value = pool === null ? "" : String(pool);
    setValue($("t-approvals"), P.sum(p, "sandboxd_approvals_pending"));
    $("t-approvals-by").textContent = sortedGroups(P.sumBy(p, "sandboxd_approvals_pending", ["tenant"]))
      .filter(function (g) { return g.value > 0; })
      .map(function (g) { return g.labels.tenant + " " + fmtNum(g.value); }).join(" · ");
    setValue($("t-sessions"), P.sum(p, "sandboxd_sessions_active"));
    ["allowed", "denied"].forEach(function (d) {
      var total = P.sum(p, "sandboxd_egress_requests_total", { decision: d });
      if (total === null && !absent("sandboxd_egress_requests_total")) total = 0;
      setValue($("t-egress-" + d), total);
      replaceChildren($("s-egress-" + d), total === null ? null : sparkline(rates(series(function (q) { return P.sum(q, "sandboxd_egress_requests_total", { decision: d }); }))));
    });

    // Jobs by tool and outcome (summed over runners).
    var jobRows = sortedGroups(P.sumBy(p, "sandboxd_jobs_total", ["tool", "outcome"])).map(function (g) {
      var f = { tool: g.labels.tool, outcome: g.labels.outcome };
      var fn = function (q) { return P.sum(q, "sandboxd_jobs_total", f); };
      var rs = rates(series(fn));
      return [td(f.tool), td(f.outcome, "outcome o-" + f.outcome),
        numCell(g.value, fmtNum, { metric: "sandboxd_jobs_total", tool: f.tool, outcome: f.outcome }),
        numCell(rs.length ? rs[rs.length - 1] : null, fmtRate), td(sparkline(rs))];
    });
    fillTable("jobs", jobRows, "no jobs finished yet (sandboxd_jobs_total absent)");

    // Latency percentiles per tool: all time, and over the kept window.
    var fam = "sandboxd_job_duration_seconds";
    var now = P.buckets(p, fam, ["tool"]);
    var old = history.length > 1 ? P.buckets(history[0].p, fam, ["tool"]) : new Map();
    var latRows = [];
    sortedGroups(now).forEach(function (g) {
      var all = g.buckets, recent = P.deltaBuckets(all, old.has(g.key) ? old.get(g.key).buckets : null);
      var count = all.length ? all[all.length - 1].count : 0;
      var cell = function (q) {
        var a = P.quantile(q, all), r = P.quantile(q, recent);
        var c = document.createElement("td");
        c.className = "num";
        c.textContent = fmtSeconds(a);
        c.dataset.value = a === null ? "" : String(a);
        c.dataset.q = String(q);
        if (recent !== all && r !== null) {
          var s = document.createElement("small");
          s.textContent = " (" + fmtSeconds(r) + ")";
          c.appendChild(s);
        }
        return c;
      };
      latRows.push([td(g.labels.tool), numCell(count, fmtNum, { metric: fam + "_count", tool: g.labels.tool }), cell(0.5), cell(0.9), cell(0.99)]);
    });
    fillTable("latency", latRows, "no observations (sandboxd_job_duration_seconds absent)");

    // Effects by tenant and effect.
    var eff = sortedGroups(P.sumBy(p, "sandboxd_effects_spent_total", ["tenant", "effect"]));
    var effMax = 0;
    eff.forEach(function (g) { if (g.value > effMax) effMax = g.value; });
    fillTable("effects", eff.map(function (g) {
      return [td(g.labels.tenant), td(g.labels.effect),
        numCell(g.value, fmtNum, { metric: "sandboxd_effects_spent_total", tenant: g.labels.tenant, effect: g.labels.effect }),
        td(bar(effMax > 0 ? g.value / effMax : 0))];
    }), "no effects spent (sandboxd_effects_spent_total absent)");

    // Guard budgets: remaining against limit.
    var lbls = ["tenant", "rule", "effect", "scope"];
    var limits = P.sumBy(p, "sandboxd_guard_budget_limit", lbls);
    fillTable("budgets", sortedGroups(P.sumBy(p, "sandboxd_guard_budget_remaining", lbls)).map(function (g) {
      var lim = limits.has(g.key) ? limits.get(g.key).value : null;
      return [td(g.labels.tenant), td(g.labels.rule), td(g.labels.effect), td(g.labels.scope),
        numCell(g.value, fmtNum, { metric: "sandboxd_guard_budget_remaining" }), numCell(lim),
        td(lim ? bar(g.value / lim) : "")];
    }), "no budgets (sandboxd_guard_budget_remaining absent)");

    // Guard decisions by outcome and rule (summed over tenants).
    fillTable("decisions", sortedGroups(P.sumBy(p, "sandboxd_guard_decisions_total", ["outcome", "rule"])).map(function (g) {
      var f = { outcome: g.labels.outcome, rule: g.labels.rule };
      var rs = rates(series(function (q) { return P.sum(q, "sandboxd_guard_decisions_total", f); }));
      return [td(f.outcome, "outcome o-" + f.outcome), td(f.rule || DASH),
        numCell(g.value, fmtNum, { metric: "sandboxd_guard_decisions_total", outcome: f.outcome, rule: f.rule }),
        numCell(rs.length ? rs[rs.length - 1] : null, fmtRate), td(sparkline(rs))];
    }), "no guard decisions (sandboxd_guard_decisions_total absent)");

    // Egress per tenant.
    var tenants = new Set();
    var req = P.sumBy(p, "sandboxd_egress_requests_total", ["tenant", "decision"]);
    var bytes = P.sumBy(p, "sandboxd_egress_bytes_total", ["tenant", "direction"]);
    req.forEach(function (g) { tenants.add(g.labels.tenant); });
    bytes.forEach(function (g) { tenants.add(g.labels.tenant); });
    var pick = function (m, a, b) { var g = m.get(a + "\u0000" + b); return g ? g.value : (m.size ? 0 : null); };
    fillTable("egress", Array.from(tenants).sort().map(function (t) {
      return [td(t), numCell(pick(req, t, "allowed")), numCell(pick(req, t, "denied")),
        numCell(pick(bytes, t, "out"), fmtBytes), numCell(pick(bytes, t, "in"), fmtBytes)];
    }), "no egress (sandboxd_egress_requests_total absent)");
  }

  // ---- polling /v1/dashboard ---------------------------------------------

  function setStatus(state, text) {
    var s = $("status");
    s.dataset.state = state;
    s.textContent = text;
  }

  function fetchWithTimeout(url, opts, ms) {
    var ctl = new AbortController();
    var timer = setTimeout(function () { ctl.abort(); }, ms);
    opts = opts || {};
    opts.signal = ctl.signal;
    opts.cache = "no-store";
    return fetch(url, opts).finally(function () { clearTimeout(timer); });
  }

  var scrapes = 0;

  // blank forgets every number: without a key (or with a wrong one) the
  // page shows nothing it read before.
  function blank() {
    history = [];
    render(P.parse(""));
  }

  function pollMetrics() {
    return fetchWithTimeout("/v1/dashboard", { headers: authHeaders() }, 5000).then(function (resp) {
      if (resp.status === 401) {
        blank();
        document.body.dataset.scope = "";
        setStatus("warn", apiKey() ? "the API key is not accepted" : "paste an API key to see the numbers");
        return null;
      }
      if (!resp.ok) throw new Error("/v1/dashboard: HTTP " + resp.status);
      var scope = resp.headers.get("X-Sandboxd-Scope") || "";
      return resp.text().then(function (text) {
        if (scope !== document.body.dataset.scope) history = []; // another key: other numbers
        document.body.dataset.scope = scope;
        var p = P.parse(text);
        history.push({ t: Date.now(), p: p });
        if (history.length > HISTORY) history.shift();
        render(p);
        scrapes++;
        document.body.dataset.scrapes = String(scrapes);
        setStatus(p.errors.length ? "warn" : "ok", "live · " + scope + " · " + new Date().toLocaleTimeString() + " · " + p.samples.length + " samples" +
          (p.errors.length ? " · " + p.errors.length + " unparsable lines" : ""));
      });
    }).catch(function (err) {
      setStatus("error", "dashboard: " + errText(err));
    });
  }

  function errText(err) {
    if (err && err.name === "AbortError") return "timed out";
    return err && err.message ? err.message : String(err);
  }

  // ---- approvals -------------------------------------------------------

  function apiKey() {
    try { return sessionStorage.getItem(KEY_STORE) || ""; } catch (e) { return ""; }
  }

  function authHeaders(extra) {
    var h = extra || {};
    var k = apiKey();
    if (k) h.Authorization = "Bearer " + k;
    return h;
  }

  // apiError turns a non-2xx response into a message naming the status and
  // the server's error message when it sent one.
  function apiError(resp) {
    return resp.text().then(function (body) {
      var msg = "";
      try {
        var j = JSON.parse(body);
        if (j && j.error) msg = j.error.message || j.error.code || "";
      } catch (e) { msg = body.slice(0, 200); }
      var hint = "";
      if (resp.status === 401) hint = apiKey() ? " (is the API key right?)" : " (paste an API key above)";
      if (resp.status === 404 && !msg) hint = " (approvals API not available)";
      return "HTTP " + resp.status + (msg ? ": " + msg : "") + hint;
    }, function () { return "HTTP " + resp.status; });
  }

  var approvalsMsg = "";

  function showApprovalsMsg(text, kind) {
    approvalsMsg = text;
    var el = $("approvals-msg");
    el.textContent = text;
    el.dataset.kind = kind || "";
    el.hidden = text === "";
  }

  function pollApprovals() {
    var all = [];
    var page = function (cursor, n) {
      var url = "/v1/approvals?state=pending" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
      return fetchWithTimeout(url, { headers: authHeaders() }, 5000).then(function (resp) {
        if (!resp.ok) return apiError(resp).then(function (m) { throw new Error(m); });
        return resp.json();
      }).then(function (body) {
        var list = body && Array.isArray(body.approvals) ? body.approvals : [];
        all = all.concat(list);
        if (body && body.next_cursor && n < 10) return page(body.next_cursor, n + 1);
        return null;
      });
    };
    return page("", 0).then(function () {
      renderApprovals(all);
      if (approvalsMsg.indexOf("HTTP") === 0 || approvalsMsg.indexOf("approvals:") === 0) showApprovalsMsg("");
    }).catch(function (err) {
      showApprovalsMsg("approvals: " + errText(err), "error");
    });
  }

  // pending remembers rendered rows by id so a poll does not wipe a reason
  // being typed.
  var rows = new Map();

  function renderApprovals(list) {
    var ul = $("approvals");
    var seen = new Set();
    list.forEach(function (a) {
      if (!a || typeof a.id !== "string") return;
      seen.add(a.id);
      if (!rows.has(a.id)) {
        var li = approvalItem(a);
        rows.set(a.id, li);
        ul.appendChild(li);
      }
    });
    rows.forEach(function (li, id) {
      if (!seen.has(id) && !li.dataset.busy) { li.remove(); rows.delete(id); }
    });
    $("approvals-note").textContent = list.length + " pending";
    $("approvals-note").dataset.value = String(list.length);
    if (list.length === 0 && !ul.firstChild) {
      var empty = document.createElement("li");
      empty.className = "empty";
      empty.textContent = "nothing waits for a decision";
      empty.dataset.placeholder = "1";
      ul.appendChild(empty);
    } else if (list.length > 0) {
      Array.prototype.slice.call(ul.querySelectorAll("li[data-placeholder]")).forEach(function (e) { e.remove(); });
    }
  }

  function approvalItem(a) {
    var li = document.createElement("li");
    li.className = "approval";
    li.dataset.id = a.id;
    if (typeof a.job_id === "string") li.dataset.jobId = a.job_id;
    var head = document.createElement("div");
    head.className = "head";
    var tool = document.createElement("strong");
    tool.textContent = String(a.tool || "?");
    head.appendChild(tool);
    var meta = document.createElement("span");
    meta.className = "meta";
    meta.textContent = [
      "tenant " + (a.tenant || DASH),
      a.rule ? "rule " + a.rule : "",
      Array.isArray(a.effects) && a.effects.length ? "effects " + a.effects.join(", ") : "",
      a.job_id ? "job " + a.job_id : "",
      a.session_id ? "session " + a.session_id : "",
      a.expires_at ? "expires " + new Date(a.expires_at).toLocaleTimeString() : ""
    ].filter(Boolean).join(" · ");
    head.appendChild(meta);
    li.appendChild(head);
    if (a.reason) {
      var why = document.createElement("div");
      why.className = "why";
      why.textContent = String(a.reason);
      li.appendChild(why);
    }
    var args = document.createElement("pre");
    var text = "";
    try { text = JSON.stringify(a.arguments, null, 2) || ""; } catch (e) { text = String(a.arguments); }
    args.textContent = text.length > 2000 ? text.slice(0, 2000) + "\n…" : text;
    li.appendChild(args);

    var form = document.createElement("div");
    form.className = "decide";
    var reason = document.createElement("input");
    reason.type = "text";
    reason.placeholder = "reason (optional)";
    reason.className = "reason";
    reason.maxLength = 500;
    var approve = document.createElement("button");
    approve.type = "button";
    approve.className = "approve";
    approve.textContent = "Approve";
    var deny = document.createElement("button");
    deny.type = "button";
    deny.className = "deny";
    deny.textContent = "Deny";
    var result = document.createElement("span");
    result.className = "result";
    form.appendChild(reason);
    form.appendChild(approve);
    form.appendChild(deny);
    form.appendChild(result);
    li.appendChild(form);

    var decide = function (decision) {
      approve.disabled = deny.disabled = true;
      li.dataset.busy = "1";
      result.textContent = decision === "approve" ? "approving…" : "denying…";
      fetchWithTimeout("/v1/approvals/" + encodeURIComponent(a.id), {
        method: "POST",
        headers: authHeaders({ "Content-Type": "application/json" }),
        body: JSON.stringify({ decision: decision, reason: reason.value })
      }, 10000).then(function (resp) {
        if (resp.ok) return resp.json().then(function (ap) {
          result.textContent = (ap && ap.state) || (decision === "approve" ? "approved" : "denied");
          li.dataset.state = result.textContent;
          setTimeout(function () { li.remove(); rows.delete(a.id); }, 1500);
        });
        return apiError(resp).then(function (m) {
          if (resp.status === 409) m = "no longer pending (" + m + ")";
          result.textContent = m;
          li.dataset.state = "error";
          delete li.dataset.busy;
          approve.disabled = deny.disabled = resp.status === 409 || resp.status === 404;
        });
      }).catch(function (err) {
        result.textContent = errText(err);
        li.dataset.state = "error";
        delete li.dataset.busy;
        approve.disabled = deny.disabled = false;
      });
    };
    approve.addEventListener("click", function () { decide("approve"); });
    deny.addEventListener("click", function () { decide("deny"); });
    return li;
  }

  // ---- API key field ---------------------------------------------------

  function setupKey() {
    var input = $("api-key");
    input.value = apiKey();
    $("key-form").addEventListener("submit", function (ev) {
      ev.preventDefault();
      try { sessionStorage.setItem(KEY_STORE, input.value.trim()); } catch (e) { showApprovalsMsg("cannot store the key: " + errText(e), "error"); }
      pollMetrics();
      pollApprovals();
    });
    $("key-clear").addEventListener("click", function () {
      try { sessionStorage.removeItem(KEY_STORE); } catch (e) { /* nothing stored */ }
      input.value = "";
      pollMetrics();
      pollApprovals();
    });
  }

  // ---- main loop -------------------------------------------------------

  function loop() {
    Promise.all([pollMetrics(), pollApprovals()]).catch(function (err) {
      setStatus("error", errText(err));
    }).then(function () { setTimeout(loop, POLL_MS); });
  }

  function start() {
    try {
      if (!P) { setStatus("error", "prom.js did not load"); return; }
      setupKey();
      loop();
    } catch (err) {
      setStatus("error", "dashboard: " + errText(err));
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
