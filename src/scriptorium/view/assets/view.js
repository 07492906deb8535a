/* scriptorium view: draws the session model embedded in this page.
   Layout: one row per visible item (a turn, or a collapsed run of turns), the row = the
   item's depth in the DAG, lanes assigned per line (a line follows first children, a fork
   starts a new line). Only the rows inside the scrolled window are in the DOM. */
(function () {
  "use strict";
  var M = JSON.parse(document.getElementById("model").textContent);
  var N = M.nodes, n = N.length;
  var graph = document.getElementById("graph"), sizer = document.getElementById("sizer");
  var svg = document.getElementById("edges"), rowsEl = document.getElementById("rows");
  var ROW_H = 28, LANE_W = 22, PAD_X = 16, GLYPH_R = 7, COLLAPSE_AT = 12, KEEP = 2, OVERSCAN = 12;
  var STATE_TEXT = {
    written: "written to memory by this workspace", pending: "pending: not yet in memory",
    tool: "not memory: tool row", runtime: "not memory: runtime notice",
    summary: "not memory: compaction summary", other: "not memory: root, blank or rewound turn"
  };
  var STATE_SHORT = { written: "written", pending: "pending", tool: "tool row",
    runtime: "runtime notice", summary: "summary", other: "not memory" };

  // ---- the tree --------------------------------------------------------------------------
  var children = new Array(n), isTip = new Uint8Array(n), onHeadLine = new Uint8Array(n);
  for (var i = 0; i < n; i++) children[i] = [];
  for (i = 0; i < n; i++) if (N[i].parent >= 0) children[N[i].parent].push(i);
  var headIdx = M.session.head, branchOfTip = {};
  M.branches.forEach(function (b, k) { isTip[b.tip] = 1; branchOfTip[b.tip] = k; });
  for (i = headIdx; i >= 0; i = N[i].parent) onHeadLine[i] = 1;
  var owedBy = {};  // node index -> [branch index] of live branches that owe it
  M.branches.forEach(function (b, k) {  // a backlog is the line from its oldest turn to the tip
    var from = b.reason ? b.reason.pending_from : -1;
    for (var v = b.tip; from >= 0 && v >= 0; v = N[v].parent) {
      if (N[v].state === "pending") (owedBy[v] = owedBy[v] || []).push(k);
      if (v === from) break;
    }
  });
  // first child continues the line: the head's line, then a non-fork, then the oldest
  function childRank(c) { return (onHeadLine[c] ? 0 : 2) + (N[c].fork ? 1 : 0); }
  for (i = 0; i < n; i++) if (children[i].length > 1) {
    children[i].sort(function (a, b) { return childRank(a) - childRank(b) || N[a].seq - N[b].seq; });
  }
  var lower = new Array(n);
  for (i = 0; i < n; i++) lower[i] = (N[i].text || "").toLowerCase();

  // ---- runs of single-child turns collapse into one segment ---------------------------------
  function special(v) { return v === headIdx || isTip[v] || !!N[v].fork; }
  function passes(v) { return children[v].length === 1 && !special(v); }
  var segOf = new Int32Array(n).fill(-1), segments = [];
  for (i = 0; i < n; i++) {
    var p = N[i].parent;
    if (p >= 0 && passes(p) && !special(i)) continue;  // not the start of a run
    var run = [i], v = i;
    while (passes(v) && !special(children[v][0])) { v = children[v][0]; run.push(v); }
    if (run.length >= COLLAPSE_AT) {
      var members = run.slice(KEEP, run.length - KEEP), sid = segments.length;
      var counts = {};
      members.forEach(function (m) { segOf[m] = sid; counts[N[m].state] = (counts[N[m].state] || 0) + 1; });
      segments.push({ members: members, counts: counts, expanded: false });
    }
  }

  // ---- display items and layout -----------------------------------------------------------
  // An item is a node index (>= 0) or a segment (-1 - segment id).
  var items, rowOf, laneOf, itemParent, itemKids, lanes, rowIndex;
  function itemFor(v) { var s = segOf[v]; return s >= 0 && !segments[s].expanded ? -1 - s : v; }
  function layout() {
    items = []; itemParent = new Map(); itemKids = new Map();
    var roots = [];
    for (var v = 0; v < n; v++) {
      var it = itemFor(v);
      if (it < 0 && segments[-1 - it].members[0] !== v) continue;  // inside a collapsed run
      var pv = N[v].parent, pit = pv >= 0 ? itemFor(pv) : null;
      if (pit !== null && pit === it) continue;
      items.push(it);
      if (pit === null) roots.push(it);
      else { itemParent.set(it, pit); if (!itemKids.has(pit)) itemKids.set(pit, []); itemKids.get(pit).push(it); }
    }
    // keep each parent's children in the preferred order (first child continues the line)
    itemKids.forEach(function (kids, pit) {
      if (kids.length < 2) return;
      var order = new Map();
      var last = pit < 0 ? segments[-1 - pit].members[segments[-1 - pit].members.length - 1] : pit;
      children[last].forEach(function (c, k) { order.set(itemFor(c), k); });
      kids.sort(function (a, b) { return order.get(a) - order.get(b); });
    });
    // rows: depth first, a fork's side lines right under the fork point, then the line that
    // goes on (the head's line) — every item below its parent, each line's rows together
    rowOf = new Map(); laneOf = new Map(); rowIndex = [];
    var lines = [], stack = [];
    for (var r = roots.length - 1; r >= 0; r--) stack.push({ item: roots[r], parent: null, line: null });
    while (stack.length) {
      var top = stack.pop(), cur = top.item, line = top.line;
      if (!line) { line = { items: [], parent: top.parent }; lines.push(line); }
      while (cur !== undefined) {
        rowOf.set(cur, rowIndex.length); rowIndex.push(cur); line.items.push(cur);
        var kids = itemKids.get(cur) || [];
        if (kids.length > 1) {  // side lines first (popped first), then this line goes on
          stack.push({ item: kids[0], parent: cur, line: line });
          for (var k = kids.length - 1; k >= 1; k--) stack.push({ item: kids[k], parent: cur, line: null });
          break;
        }
        cur = kids[0];
      }
    }
    // lanes: a line holds its lane from its fork point's row to its last row
    lines.forEach(function (ln) {
      ln.start = ln.parent === null ? rowOf.get(ln.items[0]) : rowOf.get(ln.parent);
      ln.end = rowOf.get(ln.items[ln.items.length - 1]);
    });
    lines.sort(function (a, b) { return a.start - b.start; });
    var laneEnd = [];
    lines.forEach(function (ln) {
      var l = ln.parent === null ? 0 : laneOf.get(ln.parent) + 1;
      while (l < laneEnd.length && laneEnd[l] >= ln.start) l++;
      laneEnd[l] = ln.end;
      ln.items.forEach(function (it) { laneOf.set(it, l); });
    });
    lanes = Math.max(1, laneEnd.length);
    sizer.style.height = Math.max(rowIndex.length * ROW_H, 1) + "px";
    sizer.style.minWidth = (PAD_X + lanes * LANE_W + 640) + "px";
  }

  // ---- drawing (only the rows in view) -----------------------------------------------------
  var SVGNS = "http://www.w3.org/2000/svg";
  var selected = null, matches = [], matchSet = new Set(), matchPos = -1;
  function x(it) { return PAD_X + laneOf.get(it) * LANE_W; }
  function y(it) { return rowOf.get(it) * ROW_H + ROW_H / 2; }
  function domId(it) { return it >= 0 ? "n-" + it : "s-" + (-1 - it); }
  function el(tag, cls, text) {
    var e = document.createElement(tag); if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text; return e;
  }
  function svgEl(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var a in attrs) e.setAttribute(a, attrs[a]); return e;
  }
  function glyph(state, cx, cy) {
    var r = GLYPH_R;
    if (state === "pending") return svgEl("path", { d: "M" + cx + " " + (cy - r) + "L" + (cx + r) + " " + cy + "L" + cx + " " + (cy + r) + "L" + (cx - r) + " " + cy + "Z", "class": "glyph glyph-pending" });
    if (state === "tool") return svgEl("rect", { x: cx - 5, y: cy - 5, width: 10, height: 10, "class": "glyph glyph-tool" });
    if (state === "runtime") return svgEl("path", { d: "M" + cx + " " + (cy - r) + "L" + (cx + r) + " " + (cy + r - 1) + "L" + (cx - r) + " " + (cy + r - 1) + "Z", "class": "glyph glyph-runtime" });
    if (state === "summary") return svgEl("rect", { x: cx - r, y: cy - 5, width: 2 * r, height: 10, rx: 3, "class": "glyph glyph-summary" });
    if (state === "other") return svgEl("circle", { cx: cx, cy: cy, r: r - 2, "class": "glyph glyph-other" });
    return svgEl("circle", { cx: cx, cy: cy, r: r, "class": "glyph glyph-written" });
  }
  function snippet(t) { t = (t || "").replace(/\s+/g, " ").trim(); return t.length > 160 ? t.slice(0, 160) + "…" : (t || "(empty)"); }
  function roleText(v) { return N[v].role === "tool" ? "tool" : N[v].role; }
  function nodeLabel(v) {
    var node = N[v], bits = [roleText(v) + " turn " + node.id, STATE_TEXT[node.state]];
    if (v === headIdx) bits.push("head");
    if (isTip[v]) bits.push(M.branches[branchOfTip[v]].archived ? "archived tip" : "live tip");
    if (node.fork) bits.push("fork: " + node.fork);
    if (node.rewound) bits.push("rewound");
    bits.push(snippet(node.text).slice(0, 80));
    return bits.join(", ");
  }
  function segText(s) {
    var seg = segments[s], parts = [];
    ["written", "pending", "tool", "runtime", "summary", "other"].forEach(function (st) {
      if (seg.counts[st]) parts.push(seg.counts[st] + " " + STATE_SHORT[st]);
    });
    return seg.members.length + " turns collapsed (" + parts.join(", ") + ")";
  }
  function segMatches(s) {
    var k = 0; segments[s].members.forEach(function (m) { if (matchSet.has(m)) k++; }); return k;
  }
  function drawRow(it) {
    var row = el("div", "row"), top = rowOf.get(it) * ROW_H;
    row.id = domId(it); row.style.top = top + "px";
    row.setAttribute("role", "treeitem");
    row.style.paddingLeft = (PAD_X + lanes * LANE_W + 6) + "px";
    if (it >= 0) {
      var node = N[it];
      row.dataset.node = node.id; row.dataset.state = node.state; row.dataset.index = it;
      row.setAttribute("aria-label", nodeLabel(it));
      if (matchSet.has(it)) row.classList.add("match");
      row.appendChild(el("span", "role", roleText(it)));
      if (it === headIdx) row.appendChild(el("span", "pill head", "HEAD"));
      if (isTip[it]) row.appendChild(el("span", "pill tip", M.branches[branchOfTip[it]].archived ? "archived tip" : "tip"));
      if (node.fork) { var f = el("span", "pill fork", node.fork); f.dataset.fork = node.fork; row.appendChild(f); }
      row.appendChild(el("span", "text", snippet(node.text)));
    } else {
      var s = -1 - it, seg = segments[s];
      row.classList.add("segment"); row.dataset.segment = s;
      row.setAttribute("aria-expanded", "false");
      var label = segText(s), hits = segMatches(s);
      if (hits) { label += ", " + hits + " search match" + (hits > 1 ? "es" : ""); row.classList.add("match"); }
      row.setAttribute("aria-label", label + ". Press Enter to expand.");
      var bar = el("span", "bar");
      ["written", "pending", "tool", "runtime", "summary", "other"].forEach(function (st) {
        if (!seg.counts[st]) return;
        var b = el("span"); b.style.width = (100 * seg.counts[st] / seg.members.length) + "%";
        b.style.background = "var(--" + st + ")"; bar.appendChild(b);
      });
      row.appendChild(el("span", "pill fork", "▸ " + seg.members.length));
      row.appendChild(bar);
      row.appendChild(el("span", "text", label + " — click or press Enter to expand"));
    }
    if (it === selected) { row.classList.add("selected"); row.setAttribute("aria-selected", "true"); }
    return row;
  }
  function drawEdge(it, frag) {
    var p = itemParent.get(it), px = x(p), py = y(p), cx = x(it), cy = y(it), d;
    if (px === cx) d = "M" + px + " " + py + "V" + cy;
    else {
      var bend = py + ROW_H;
      d = "M" + px + " " + py + "C" + px + " " + (py + ROW_H * 0.6) + " " + cx + " " + (bend - ROW_H * 0.6) + " " + cx + " " + bend + (cy > bend ? "V" + cy : "");
    }
    var cls = "edge" + (it >= 0 && N[it].via === "caller" ? " caller" : "");
    frag.appendChild(svgEl("path", { d: d, "class": cls }));
  }
  function drawGlyph(it, frag) {
    var cx = x(it), cy = y(it);
    if (it >= 0) {
      var g = glyph(N[it].state, cx, cy); g.setAttribute("data-glyph", N[it].id); frag.appendChild(g);
      if (it === headIdx) frag.appendChild(svgEl("circle", { cx: cx, cy: cy, r: GLYPH_R + 4, "class": "ring" }));
    } else {
      frag.appendChild(svgEl("rect", { x: cx - 6, y: cy - 11, width: 12, height: 22, rx: 5, "class": "glyph glyph-segment" }));
    }
  }
  function draw() {
    var rowsTotal = rowIndex.length, h = Math.max(rowsTotal * ROW_H, 1);
    var w = PAD_X + lanes * LANE_W + 6;
    svg.setAttribute("width", w); svg.setAttribute("height", h);
    var first = Math.max(0, Math.floor(graph.scrollTop / ROW_H) - OVERSCAN);
    var last = Math.min(rowsTotal - 1, Math.ceil((graph.scrollTop + graph.clientHeight) / ROW_H) + OVERSCAN);
    var frag = document.createDocumentFragment(), sfrag = document.createDocumentFragment();
    for (var k = 0; k < rowIndex.length; k++) {  // edges crossing the window (from above too)
      var it = rowIndex[k];
      if (!itemParent.has(it)) continue;
      if (k >= first && rowOf.get(itemParent.get(it)) <= last) drawEdge(it, sfrag);
    }
    for (var r = first; r <= last; r++) {
      frag.appendChild(drawRow(rowIndex[r]));
      drawGlyph(rowIndex[r], sfrag);
    }
    rowsEl.replaceChildren(frag); svg.replaceChildren(sfrag);
  }
  var pending = false;
  graph.addEventListener("scroll", function () {
    if (pending) return; pending = true;
    requestAnimationFrame(function () { pending = false; draw(); });
  });
  window.addEventListener("resize", function () { draw(); });

  // ---- selection, details ---------------------------------------------------------------------
  var details = document.getElementById("details");
  function fmtTime(t) {
    if (typeof t !== "number" || !t) return String(t || "");
    try { return new Date(t * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC"); } catch (e) { return String(t); }
  }
  function dl(pairs) {
    var d = el("dl");
    pairs.forEach(function (p) { if (p[1] === "" || p[1] === null || p[1] === undefined) return; d.appendChild(el("dt", "", p[0])); d.appendChild(el("dd", "", String(p[1]))); });
    return d;
  }
  function whyBox(k) {
    var b = M.branches[k], r = b.reason, box = el("div", "why");
    if (!r) return null;
    var head = el("p"); head.appendChild(el("strong", "", (b.head ? "Head branch" : "Branch") + " ending at " + N[b.tip].id + ": " + r.code.replace(/_/g, " ")));
    box.appendChild(head);
    box.appendChild(el("p", "", r.message));
    box.appendChild(el("p", "muted", r.turns + " pending turn" + (r.turns === 1 ? "" : "s") + ", " + r.tokens + " of " + r.threshold + " tokens"));
    if (r.failure) box.appendChild(dl([["failure", r.failure.reason_code], ["retryable", r.failure.retryable], ["message", r.failure.message], ["at", fmtTime(r.failure.at)]]));
    box.dataset.reason = r.code;
    return box;
  }
  function showNode(v) {
    var node = N[v];
    details.replaceChildren();
    details.appendChild(el("h2", "", roleText(v) + " turn " + node.id));
    var st = el("p"); var pill = el("span", "pill state c-" + node.state, STATE_TEXT[node.state]);
    pill.dataset.state = node.state; st.appendChild(pill); details.appendChild(st);
    var marks = [];
    if (v === headIdx) marks.push("head");
    if (isTip[v]) marks.push(M.branches[branchOfTip[v]].archived ? "archived tip" : "live tip");
    details.appendChild(dl([["marks", marks.join(", ")], ["fork", node.fork], ["seq", node.seq],
      ["created", fmtTime(node.created_at)], ["parent", node.parent >= 0 ? N[node.parent].id + (node.via === "caller" ? " (caller)" : "") : "none"],
      ["memory mark", node.mark ? node.mark + (node.mark === M.workspace_id ? " (this workspace)" : " (another workspace)") : ""],
      ["rewound", node.rewound ? "yes" : ""], ["name", node.name]]));
    var ks = (owedBy[v] || []).slice();
    if (isTip[v] && ks.indexOf(branchOfTip[v]) < 0 && M.branches[branchOfTip[v]].reason && M.branches[branchOfTip[v]].reason.turns) ks.push(branchOfTip[v]);
    if (ks.length) {
      details.appendChild(el("h3", "", "Why pending"));
      ks.forEach(function (k) { var b = whyBox(k); if (b) details.appendChild(b); });
    } else if (node.state === "pending") {
      details.appendChild(el("p", "why", "No live branch offers this turn: it is on a rewound or archived line, or before a mark (memory verify reports such a gap)."));
    }
    details.appendChild(el("h3", "", "Text"));
    details.appendChild(el("pre", "node-text", node.text + (node.chars > node.text.length ? "\n… (" + node.chars + " characters; the page keeps the first " + node.text.length + ")" : "")));
    var cites = node.cites || [];
    details.appendChild(el("h3", "", cites.length ? "Cited by " + cites.length + " topic paragraph" + (cites.length > 1 ? "s" : "") : "Cited by no topic paragraph"));
    if (cites.length) {
      var ul = el("ul", "cites");
      cites.forEach(function (c) {
        var blk = M.blocks[c], li = el("li");
        li.dataset.block = blk.block_id;
        var where = el("div", "where");
        var a = el("a", "", blk.path + " ^" + blk.block_id);
        a.href = "#topic=" + encodeURIComponent(blk.path) + "&block=" + encodeURIComponent(blk.block_id);
        a.addEventListener("click", function (ev) { ev.preventDefault(); openTopic(blk.path, blk.block_id, a); });
        where.appendChild(a);
        if (blk.headings.length) where.appendChild(document.createTextNode(" — " + blk.headings.join(" › ")));
        li.appendChild(where); li.appendChild(el("p", "block-text", blk.text.replace(/\[\^[A-Za-z0-9_-]+\]/g, "")));
        ul.appendChild(li);
      });
      details.appendChild(ul);
    }
    var md = el("details"); md.appendChild(el("summary", "", "Metadata"));
    md.appendChild(el("pre", "", JSON.stringify(node.meta, null, 2))); details.appendChild(md);
  }
  function showSegment(s) {
    details.replaceChildren();
    details.appendChild(el("h2", "", "Collapsed run"));
    details.appendChild(el("p", "", segText(s) + ". From " + N[segments[s].members[0]].id + " to " + N[segments[s].members[segments[s].members.length - 1]].id + "."));
    var b = el("button", "", "Expand this run"); b.type = "button";
    b.addEventListener("click", function () { expand(s, segments[s].members[0]); graph.focus(); });
    details.appendChild(b);
  }
  function select(it, opts) {
    selected = it;
    ensureVisible(it);
    draw();
    graph.setAttribute("aria-activedescendant", domId(it));
    if (it >= 0) showNode(it); else showSegment(-1 - it);
    if (!opts || opts.focus !== false) graph.focus({ preventScroll: true });
  }
  function ensureVisible(it) {
    var top = rowOf.get(it) * ROW_H, bottom = top + ROW_H;
    if (top < graph.scrollTop + ROW_H) graph.scrollTop = Math.max(0, top - graph.clientHeight / 3);
    else if (bottom > graph.scrollTop + graph.clientHeight - ROW_H) graph.scrollTop = bottom - graph.clientHeight * 2 / 3;
    var left = x(it) - 40;
    if (left < graph.scrollLeft || left > graph.scrollLeft + graph.clientWidth - 200) graph.scrollLeft = Math.max(0, left - 40);
  }
  function expand(s, focusNode) {
    segments[s].expanded = true; layout();
    select(focusNode !== undefined ? focusNode : segments[s].members[0]);
  }
  function reveal(v, opts) {  // make node v a visible item (expanding its run) and select it
    if (segOf[v] >= 0 && !segments[segOf[v]].expanded) { segments[segOf[v]].expanded = true; layout(); }
    select(v, opts);
  }
  rowsEl.addEventListener("click", function (ev) {
    var row = ev.target.closest(".row"); if (!row) return;
    if (row.dataset.segment !== undefined) expand(+row.dataset.segment);
    else select(+row.dataset.index);
  });

  // ---- keyboard: along a branch ---------------------------------------------------------------
  function endOfLine(it) { var k; while ((k = itemKids.get(it)) && k.length) it = k[0]; return it; }
  graph.addEventListener("keydown", function (ev) {
    if (ev.altKey || ev.ctrlKey || ev.metaKey) return;
    var it = selected === null ? items[0] : selected, next = null;
    var par = itemParent.has(it) ? itemParent.get(it) : null;
    var sibs = par === null ? items.filter(function (r) { return !itemParent.has(r); }) : itemKids.get(par);
    switch (ev.key) {
      case "ArrowUp": next = par; break;
      case "ArrowDown": next = (itemKids.get(it) || [])[0]; break;
      case "ArrowLeft": next = sibs[sibs.indexOf(it) - 1]; break;
      case "ArrowRight": next = sibs[sibs.indexOf(it) + 1]; break;
      case "Home": next = items[0]; break;
      case "End": next = endOfLine(it); break;
      case "h": case "H": if (headIdx >= 0) { ev.preventDefault(); reveal(headIdx); } return;
      case "/": ev.preventDefault(); document.getElementById("q").focus(); return;
      case "Enter": case " ":
        ev.preventDefault();
        if (it < 0) expand(-1 - it); else select(it);
        return;
      default: return;
    }
    ev.preventDefault();
    if (next !== null && next !== undefined) select(next);
  });

  // ---- search over node text ----------------------------------------------------------------
  var q = document.getElementById("q"), qcount = document.getElementById("qcount"), timer = null;
  var searched = null;
  function runSearch() {
    var term = q.value.trim().toLowerCase();
    if (term === searched) return;
    searched = term; matches = []; matchSet = new Set(); matchPos = -1;
    if (term) for (var v = 0; v < n; v++) if (lower[v].indexOf(term) >= 0) { matches.push(v); matchSet.add(v); }
    qcount.textContent = term ? (matches.length + " match" + (matches.length === 1 ? "" : "es")) : "";
    draw();
  }
  q.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(runSearch, 120); });
  q.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") { q.value = ""; runSearch(); graph.focus(); return; }
    if (ev.key !== "Enter") return;
    ev.preventDefault(); clearTimeout(timer); runSearch();
    if (!matches.length) return;
    matchPos = ev.shiftKey ? (matchPos <= 0 ? matches.length - 1 : matchPos - 1) : (matchPos + 1) % matches.length;
    reveal(matches[matchPos], { focus: false });
    qcount.textContent = (matchPos + 1) + " of " + matches.length + " matches";
  });

  // ---- topics (their text is in the page) -------------------------------------------------
  var dialog = document.getElementById("topic"), lastOpener = null;
  function openTopic(path, blockId, opener) {
    lastOpener = opener || null;
    document.getElementById("topic-heading").textContent = path;
    var body = document.getElementById("topic-body"), pre = el("pre"), hit = null;
    (M.topics[path] || "(topic text not in this page)").split("\n").forEach(function (line) {
      var span = el("span", "line", line + "\n");
      if (blockId && line.indexOf("^" + blockId) >= 0) { span.classList.add("hit"); span.id = "block-" + blockId; hit = span; }
      pre.appendChild(span);
    });
    body.replaceChildren(pre);
    if (typeof dialog.showModal === "function") dialog.showModal(); else dialog.setAttribute("open", "");
    if (hit) hit.scrollIntoView({ block: "center" });
    document.getElementById("topic-close").focus();
  }
  document.getElementById("topic-close").addEventListener("click", function () { dialog.close(); });
  dialog.addEventListener("close", function () { if (lastOpener) lastOpener.focus(); });

  // ---- header, legend, branches ---------------------------------------------------------------
  function legend() {
    var list = document.getElementById("legend-list");
    function item(svgChild, text, w) {
      var li = el("li"), s = svgEl("svg", { width: w || 18, height: 18, "aria-hidden": "true" });
      s.appendChild(svgChild); li.appendChild(s); li.appendChild(el("span", "", text)); list.appendChild(li);
    }
    ["written", "pending", "tool", "runtime", "summary", "other"].forEach(function (st) {
      var li = el("li"), s = svgEl("svg", { width: 18, height: 18, "aria-hidden": "true" });
      s.appendChild(glyph(st, 9, 9)); li.appendChild(s); li.dataset.legend = st;
      li.appendChild(el("span", "", STATE_TEXT[st] + " (" + (M.counts[st] || 0) + ")")); list.appendChild(li);
    });
    var hl = el("li"); hl.appendChild(el("span", "pill head", "HEAD")); hl.appendChild(el("span", "", "the session head (ringed)")); list.appendChild(hl);
    var tl = el("li"); tl.appendChild(el("span", "pill tip", "tip")); tl.appendChild(el("span", "", "end of a live branch")); list.appendChild(tl);
    var fl = el("li"); fl.appendChild(el("span", "pill fork", "retry · edit · sub-agent")); fl.appendChild(el("span", "", "how a fork began")); list.appendChild(fl);
    var sl = el("li"); sl.appendChild(el("span", "pill fork", "▸ 40")); sl.appendChild(el("span", "", "a collapsed run of turns")); list.appendChild(sl);
    item(svgEl("path", { d: "M2 9H16", "class": "edge caller" }), "sub-call edge (sub-agent, tool)");
  }
  function header() {
    document.getElementById("title").textContent = (M.session.title || M.session.id);
    var c = M.counts;
    document.getElementById("summary").textContent = "Session " + M.session.id + " · " + n + " nodes: " +
      c.written + " written, " + c.pending + " pending, " + (c.tool + c.runtime + c.summary + c.other) +
      " not memory · workspace " + M.workspace_id + " · " + M.branches.length + " branch tip" + (M.branches.length === 1 ? "" : "s");
  }
  function branchList() {
    var ul = document.getElementById("branch-list");
    M.branches.forEach(function (b, k) {
      var li = el("li"), btn = el("button"); btn.type = "button";
      var r = b.reason, what = b.archived ? "archived" : !r ? "" : r.turns ? r.turns + " pending — " + r.code.replace(/_/g, " ") : "all in memory";
      btn.textContent = (b.head ? "HEAD · " : "") + "tip " + N[b.tip].id + (what ? " · " + what : "");
      btn.dataset.tip = N[b.tip].id; if (r) btn.dataset.reason = r.code;
      btn.addEventListener("click", function () { reveal(b.tip); });
      li.appendChild(btn); ul.appendChild(li);
    });
  }

  header(); legend(); branchList(); layout();
  if (n) select(headIdx >= 0 ? itemFor(headIdx) : items[0], { focus: false }); else draw();
  requestAnimationFrame(function () {
    setTimeout(function () { window.__viewReady = performance.now(); document.body.dataset.ready = "1"; }, 0);
  });
  window.__view = { layout: function () { return { items: items.length, lanes: lanes, rows: rowIndex.length, segments: segments.length }; },
    expandAll: function () { segments.forEach(function (s) { s.expanded = true; }); layout(); draw(); } };
})();
