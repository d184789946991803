// Prometheus text exposition format (version 0.0.4) parser and the few
// PromQL-like helpers the dashboard needs. No dependencies; never throws on
// bad input: malformed lines are counted in result.errors and skipped.
(function (global) {
  "use strict";

  // parse returns {samples: [{name, labels, value}], types: {family: type},
  // help: {family: text}, errors: [string]}.
  function parse(text) {
    var out = { samples: [], types: Object.create(null), help: Object.create(null), errors: [] };
    if (typeof text !== "string") {
      out.errors.push("not text");
      return out;
    }
    var lines = text.split("\n");
    for (var i = 0; i < lines.length; i++) {
      var line = lines[i];
      if (line.length && line.charCodeAt(line.length - 1) === 13) line = line.slice(0, -1); // \r
      var trimmed = line.trim();
      if (trimmed === "") continue;
      if (trimmed.charAt(0) === "#") {
        var m = /^#\s*(HELP|TYPE)\s+(\S+)\s*(.*)$/.exec(trimmed);
        if (m) {
          if (m[1] === "TYPE") out.types[m[2]] = m[3].trim();
          else out.help[m[2]] = unescapeHelp(m[3]);
        }
        continue;
      }
      var s = parseSample(trimmed);
      if (s === null) {
        if (out.errors.length < 20) out.errors.push("line " + (i + 1) + ": " + trimmed.slice(0, 80));
        continue;
      }
      out.samples.push(s);
    }
    return out;
  }

  function unescapeHelp(s) {
    return s.replace(/\\(\\|n)/g, function (_, c) { return c === "n" ? "\n" : "\\"; });
  }

  // parseSample parses `name{l="v",...} value [timestamp]`, or returns null.
  function parseSample(line) {
    var pos = 0, n = line.length;
    var nm = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
    if (!nm) return null;
    var name = nm[0];
    pos = name.length;
    var labels = Object.create(null);
    if (line.charAt(pos) === "{") {
      pos++;
      for (;;) {
        while (pos < n && (line.charAt(pos) === " " || line.charAt(pos) === "\t")) pos++;
        if (line.charAt(pos) === "}") { pos++; break; }
        var lm = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(line.slice(pos));
        if (!lm) return null;
        var lname = lm[0];
        pos += lname.length;
        while (pos < n && line.charAt(pos) === " ") pos++;
        if (line.charAt(pos) !== "=") return null;
        pos++;
        while (pos < n && line.charAt(pos) === " ") pos++;
        if (line.charAt(pos) !== "\"") return null;
        pos++;
        var val = "", closed = false;
        while (pos < n) {
          var c = line.charAt(pos);
          if (c === "\\") {
            var e = line.charAt(pos + 1);
            val += e === "n" ? "\n" : e; // \\ and \" and anything else verbatim
            pos += 2;
            continue;
          }
          if (c === "\"") { closed = true; pos++; break; }
          val += c;
          pos++;
        }
        if (!closed) return null;
        labels[lname] = val;
        while (pos < n && line.charAt(pos) === " ") pos++;
        if (line.charAt(pos) === ",") { pos++; continue; }
        if (line.charAt(pos) === "}") { pos++; break; }
        return null;
      }
    }
    var rest = line.slice(pos).trim().split(/\s+/);
    if (rest.length < 1 || rest.length > 2 || rest[0] === "") return null;
    var value = parseValue(rest[0]);
    if (value === null) return null;
    return { name: name, labels: labels, value: value };
  }

  function parseValue(s) {
    switch (s) {
      case "+Inf": case "Inf": return Infinity;
      case "-Inf": return -Infinity;
      case "NaN": return NaN;
    }
    if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(s)) return null;
    return Number(s);
  }

  // has reports whether any sample of the metric name exists.
  function has(p, name) {
    for (var i = 0; i < p.samples.length; i++) if (p.samples[i].name === name) return true;
    return false;
  }

  // sumBy sums the samples of name matching the label filter (an object of
  // exact values), grouped by the listed labels. It returns a Map from a
  // key (the label values joined by "\u0000") to {labels, value}; an empty
  // Map when the metric is absent.
  function sumBy(p, name, by, filter) {
    var groups = new Map();
    for (var i = 0; i < p.samples.length; i++) {
      var s = p.samples[i];
      if (s.name !== name || !matches(s.labels, filter)) continue;
      var key = [], lbl = {};
      for (var j = 0; j < by.length; j++) {
        var v = s.labels[by[j]] === undefined ? "" : s.labels[by[j]];
        key.push(v);
        lbl[by[j]] = v;
      }
      var k = key.join("\u0000");
      var g = groups.get(k);
      if (!g) groups.set(k, { labels: lbl, value: s.value });
      else g.value += s.value;
    }
    return groups;
  }

  // sum is sumBy without grouping: the total, or null when no sample matches.
  function sum(p, name, filter) {
    var g = sumBy(p, name, [], filter);
    var only = g.get("");
    return only ? only.value : null;
  }

  function matches(labels, filter) {
    if (!filter) return true;
    for (var k in filter) {
      if ((labels[k] === undefined ? "" : labels[k]) !== filter[k]) return false;
    }
    return true;
  }

  // buckets returns the cumulative histogram buckets of family (the name
  // without _bucket), summed over every label except le and grouped by the
  // listed labels: Map key -> {labels, buckets: [{le, count}] sorted by le}.
  function buckets(p, family, by) {
    var per = sumBy(p, family + "_bucket", by.concat(["le"]));
    var out = new Map();
    per.forEach(function (g) {
      var key = by.map(function (l) { return g.labels[l]; }).join("\u0000");
      var le = parseValue(g.labels.le);
      if (le === null) return;
      var h = out.get(key);
      if (!h) {
        var lbl = {};
        by.forEach(function (l) { lbl[l] = g.labels[l]; });
        h = { labels: lbl, buckets: [] };
        out.set(key, h);
      }
      h.buckets.push({ le: le, count: g.value });
    });
    out.forEach(function (h) { h.buckets.sort(function (a, b) { return a.le - b.le; }); });
    return out;
  }

  // quantile estimates the q-quantile from cumulative buckets the way
  // PromQL's histogram_quantile does (linear interpolation inside the
  // bucket; the +Inf bucket yields the highest finite bound). It returns
  // null when there are no observations.
  function quantile(q, bs) {
    if (!bs || bs.length === 0 || !(q >= 0 && q <= 1)) return null;
    var last = bs[bs.length - 1];
    if (last.le !== Infinity) return null;
    var total = last.count;
    if (!(total > 0)) return null;
    var rank = q * total;
    var i = 0;
    while (i < bs.length - 1 && bs[i].count < rank) i++;
    if (bs[i].le === Infinity) return bs.length > 1 ? bs[bs.length - 2].le : null;
    var lower = 0, prev = 0;
    if (i > 0) { lower = bs[i - 1].le; prev = bs[i - 1].count; }
    var upper = bs[i].le, inBucket = bs[i].count - prev;
    if (i === 0 && upper <= 0) return upper;
    if (inBucket <= 0) return upper;
    return lower + (upper - lower) * ((rank - prev) / inBucket);
  }

  // delta subtracts older cumulative buckets from newer ones (a counter
  // reset, any count going down, yields the newer buckets unchanged).
  function deltaBuckets(newer, older) {
    if (!older || older.length !== newer.length) return newer;
    var out = [];
    for (var i = 0; i < newer.length; i++) {
      if (older[i].le !== newer[i].le || newer[i].count < older[i].count) return newer;
      out.push({ le: newer[i].le, count: newer[i].count - older[i].count });
    }
    return out;
  }

  var api = { parse: parse, has: has, sum: sum, sumBy: sumBy, buckets: buckets, quantile: quantile, deltaBuckets: deltaBuckets };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  global.SandboxdProm = api;
})(typeof window !== "undefined" ? window : this);
