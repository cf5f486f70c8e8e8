// The teacher's remote (/r/<code>/teach): steps the class by announcing the view the current page links to (its
// Next / Previous / lesson step / hints links, read from the page itself, so every followable page works), asks a
// lesson's prepared question or the teacher's own, shows the live histogram and the key (which the projector does
// not), reveals and ends. The projector follows the room's state like a student's phone does (static/room.js).
// The room's events come over htmx's SSE extension (templates/room_teach.html); the followers, by hx-get.
(function () {
  "use strict";
  var root = document.querySelector("[data-teach]");
  if (!root) return;
  var code = root.getAttribute("data-code"), lang = root.getAttribute("data-lang");
  var api = "/api/v1/rooms/" + code;
  var kit = window.labRoomKit, json = kit.json, asView = kit.asView;
  var state = null, pollId = null, seq = 0, targets = {}, prepared = null, shape = {};
  var cellTables = [], cellChosen = 0; // the lab's matrices whose cells open their arithmetic, and the one picked

  function $(sel) { return root.querySelector(sel); }
  function viewUrl(v) {
    var p = new URLSearchParams(v.query);
    p.set("lang", lang);
    return v.page + "?" + p.toString();
  }
  // A cell ("row,col") by its tokens (static/room-kit.js): the labels the poll was asked with, or before it is
  // asked, those of the matrix the class sees.
  function cellLabel(v, p) { return kit.tokensOf(v, (p || shape).row_labels, (p || shape).col_labels); }

  // ---- the current view, read from the page the class sees --------------------------------------------------
  function load(view) {
    state = view;
    var mine = ++seq;
    fetch(viewUrl(view), { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (res) { return res.text(); })
      .then(function (html) { if (mine === seq) render(new DOMParser().parseFromString(html, "text/html")); })
      .catch(function () {});
  }
  function link(doc, sel) { var a = doc.querySelector(sel); return a && a.getAttribute("href") ? a : null; }
  function render(doc) {
    $("[data-now]").textContent = doc.title;
    $("[data-now-link]").href = viewUrl(state);
    var found = {
      prev: link(doc, "a[data-action=prev]"), next: link(doc, "a[data-action=next]"),
      hints: link(doc, "a[data-toggle=hints]"),
      "lesson-prev": link(doc, "a[data-lesson-step=prev]"), "lesson-next": link(doc, "a[data-lesson-step=next]") || link(doc, "a[data-lesson-step=next-lesson]")
    };
    targets = {};
    Object.keys(found).forEach(function (k) {
      var b = root.querySelector("[data-go='" + k + "']");
      targets[k] = found[k] ? asView(found[k].getAttribute("href")) : null;
      b.disabled = !targets[k];
    });
    var hints = found.hints, hb = root.querySelector("[data-go=hints]");
    if (hints) hb.textContent = hb.getAttribute(hints.getAttribute("aria-pressed") === "true" ? "data-label-on" : "data-label-off");
    // The page's own Previous / Next: "stage" where they move the lab's (or the block's) stages.
    var staged = !!doc.querySelector("#stage ol.tabs a[href], a[data-block-stage][href]");
    ["prev", "next"].forEach(function (k) {
      var b = root.querySelector("[data-go='" + k + "']");
      b.textContent = b.getAttribute(staged ? "data-label-stage" : "data-label");
      b.hidden = !targets.prev && !targets.next;
    });
    controls(doc);
    cells(doc);
    var panel = doc.querySelector(".lesson-panel[data-lesson]");
    // While a lesson runs, its steps are the remote's first pair; the page's own steps stay below, smaller.
    $("[data-lesson-nav]").hidden = !panel;
    if (panel) root.setAttribute("data-lesson-running", ""); else root.removeAttribute("data-lesson-running");
    var ln = root.querySelector("[data-go=lesson-next]");
    ln.textContent = ln.getAttribute(found["lesson-next"] && found["lesson-next"].getAttribute("data-lesson-step") === "next-lesson"
      ? "data-label-next-lesson" : "data-label-next");
    var title = panel && panel.querySelector(".lesson-title");
    if (title) $("[data-lesson-title]").textContent = title.textContent.replace(/\s+/g, " ").trim();
    var table = doc.querySelector("table[data-matrix]");
    shape = kit.matrixShape(table);
    keyMatrix(table);
    prepared = null;
    $("[data-prepared]").hidden = true;
    if (panel) {
      var ask = { lesson: panel.getAttribute("data-lesson"), step: Number(panel.getAttribute("data-step")) };
      json(api + "/polls/lesson?lesson=" + encodeURIComponent(ask.lesson) + "&step=" + ask.step + "&lang=" + lang)
        .then(function (p) { prepared = ask; showPrepared(p); }).catch(function () {});
    }
  }
  // Every choice the page on the projector offers, as buttons on the remote: its stages (or steps), its switches
  // (mask, scale, a comparison…, /heads' roles), its positions (/predict's columns and "rank the heads"), its heads
  // (the lab's, the model view's ranked ones, or /heads' top heads of the role shown), and the heads it offers to
  // knock out. Read from the page's own links, so a page gets them on the remote by drawing them; a press announces
  // that link's view to the class.
  var GROUPS = [
    ["stages", "#stage ol.tabs a[href], nav.steps ol.tabs a[href], a[data-block-stage][href]"],
    ["switches", "a[data-toggle][href]:not([data-toggle=present]):not([data-toggle=hints]), nav.color-modes a[data-role][href]"],
    ["positions", "table[data-train] thead a[data-pos][href], a[data-rank][href]"],
    ["heads", "nav.heads a[href], a[data-head-choice][href], ol.top-heads a[data-head][href]"],
    ["knock", "a[data-knock][href], ol.ranked-heads a[href]"]
  ];
  function controls(doc) {
    GROUPS.forEach(function (g) {
      var box = $("[data-controls=" + g[0] + "]");
      if (!box) return;
      var list = box.querySelector("[data-buttons]");
      list.replaceChildren();
      var seen = {};
      doc.querySelectorAll(g[1]).forEach(function (a) {
        var view = asView(a.getAttribute("href"));
        var key = view.page + "?" + view.query;
        if (seen[key]) return;
        seen[key] = true;
        var b = document.createElement("button");
        b.type = "button";
        b.textContent = a.getAttribute("data-remote-label") || (a.textContent || "").replace(/\s+/g, " ").trim() ||
          a.getAttribute("aria-label") || "·";
        var current = a.getAttribute("aria-current") || a.getAttribute("aria-pressed");
        if (current && current !== "false") b.setAttribute("aria-pressed", "true");
        b.addEventListener("click", function () { json(api + "/state", "PUT", view).catch(function () {}); });
        list.appendChild(b);
      });
      box.hidden = !list.children.length;
    });
  }
  // A cell of the stage's matrix, chosen from the phone: the lab's cells are links (cell=tensor.head.row.col) that
  // open the cell's arithmetic on the projector. A matrix of up to GRID_COLS columns is a small grid of its cells
  // (a 5 × 5 toy matrix fits a 390 px phone); a larger one is a row and a column to type. Several matrices on the
  // stage (Q, K, V): a button each, the one with the open cell (or the stage's last, its result) first chosen.
  var GRID_COLS = 8, GRID_ROWS = 16;
  function cells(doc) {
    cellTables = Array.prototype.filter.call(doc.querySelectorAll(".matrices table[data-matrix]"), function (t) {
      return !!t.querySelector("td[data-row][data-col] a[href*='cell=']");
    });
    var box = $("[data-cells]");
    box.hidden = !cellTables.length;
    var close = doc.querySelector("#arithmetic .result a[href]");
    var cb = $("[data-cell-close]");
    cb.hidden = !close;
    targets["cell-close"] = close ? asView(close.getAttribute("href")) : null;
    if (!cellTables.length) return;
    var open = cellTables.findIndex(function (t) { return !!t.querySelector("td.selected"); });
    // The projection stage shows its input X first and three results of it (Q, K, V): X, as the page does; every
    // other stage, its result (the last matrix).
    var input = cellTables.findIndex(function (t) { return t.getAttribute("data-matrix") === "x"; });
    cellChosen = open >= 0 ? open : input >= 0 ? input : cellTables.length - 1;
    var names = $("[data-cell-matrices]");
    names.querySelectorAll("button").forEach(function (b) { b.remove(); });
    names.hidden = false; // which matrix the grid is, and with several (Q, K, V) a choice
    cellTables.forEach(function (t, i) {
      var fig = t.closest("figure"), label = fig && fig.querySelector(".mlabel");
      var b = document.createElement("button");
      b.type = "button";
      b.textContent = label ? label.textContent.trim() : t.getAttribute("data-matrix");
      b.setAttribute("data-cell-matrix", t.getAttribute("data-matrix"));
      b.addEventListener("click", function () { cellChosen = i; cellGrid(); });
      names.appendChild(b);
    });
    cellGrid();
  }
  function cellGrid() {
    var table = cellTables[cellChosen];
    $("[data-cell-matrices]").querySelectorAll("button").forEach(function (b, i) {
      b.setAttribute("aria-pressed", String(i === cellChosen));
    });
    var grid = $("[data-cell-grid]"), form = $("[data-cell-form]");
    grid.replaceChildren();
    var rows = table.querySelectorAll("tbody tr"), heads = table.querySelectorAll("thead th[scope=col]");
    var small = heads.length <= GRID_COLS && rows.length <= GRID_ROWS;
    form.hidden = small;
    root.querySelectorAll("[data-cell-hint]").forEach(function (h) {
      h.hidden = h.getAttribute("data-cell-hint") !== (small ? "grid" : "form");
    });
    var sel = table.querySelector("td.selected[data-row][data-col]");
    if (!small) {
      var first = table.querySelector("td[data-row][data-col]"), last = rows[rows.length - 1].querySelector("td:last-child");
      ["row", "col"].forEach(function (k) {
        var input = form.elements[k];
        input.min = first.getAttribute("data-" + k);
        input.max = last.getAttribute("data-" + k);
        input.value = sel ? sel.getAttribute("data-" + k) : input.value;
        input.placeholder = input.min + "–" + input.max;
      });
      return;
    }
    var t = document.createElement("table");
    t.setAttribute("data-cell-table", table.getAttribute("data-matrix"));
    var hr = document.createElement("tr");
    hr.appendChild(document.createElement("th"));
    heads.forEach(function (h) {
      var th = document.createElement("th");
      th.scope = "col";
      th.textContent = h.textContent;
      hr.appendChild(th);
    });
    var thead = document.createElement("thead"), tbody = document.createElement("tbody");
    thead.appendChild(hr);
    rows.forEach(function (tr) {
      var row = document.createElement("tr"), th = document.createElement("th");
      th.scope = "row";
      th.textContent = (tr.querySelector("th") || {}).textContent || "";
      row.appendChild(th);
      tr.querySelectorAll("td[data-row][data-col]").forEach(function (td) {
        var cell = document.createElement("td"), a = td.querySelector("a[href]");
        var b = document.createElement("button");
        b.type = "button";
        b.textContent = td.textContent.trim();
        b.setAttribute("data-row", td.getAttribute("data-row"));
        b.setAttribute("data-col", td.getAttribute("data-col"));
        b.setAttribute("aria-label", th.textContent + " · " + (heads[row.children.length - 1] || {}).textContent +
          " (" + td.getAttribute("data-row") + ", " + td.getAttribute("data-col") + ")");
        if (td.classList.contains("selected")) b.setAttribute("aria-pressed", "true");
        if (a) b.addEventListener("click", function () { announceHref(a.getAttribute("href")); });
        else b.disabled = true;
        cell.appendChild(b);
        row.appendChild(cell);
      });
      tbody.appendChild(row);
    });
    t.append(thead, tbody);
    grid.appendChild(t);
  }
  function announceHref(href) { json(api + "/state", "PUT", asView(href)).catch(function () {}); }
  $("[data-cell-form]").addEventListener("submit", function (e) {
    e.preventDefault();
    var f = e.target, table = cellTables[cellChosen];
    var td = table && table.querySelector("td[data-row='" + Number(f.elements.row.value) + "'][data-col='" +
      Number(f.elements.col.value) + "'] a[href]");
    f.classList.toggle("refused", !td);
    if (td) announceHref(td.getAttribute("href"));
  });
  $("[data-cell-close]").addEventListener("click", function () {
    if (targets["cell-close"]) json(api + "/state", "PUT", targets["cell-close"]).catch(function () {});
  });
  function showPrepared(p) {
    $("[data-prepared]").hidden = false;
    $("[data-prepared-prompt]").textContent = p.prompt;
    var list = $("[data-prepared-options]");
    list.replaceChildren();
    (p.options || []).forEach(function (o) {
      var li = document.createElement("li");
      li.textContent = o;
      if (o === p.answer) li.className = "key";
      list.appendChild(li);
    });
    $("[data-prepared-key]").textContent = p.answer == null ? "—" : cellLabel(p.answer);
  }
  // A cell poll's key is picked by clicking the cell, on a copy of the matrix the class sees (numbers only).
  function keyMatrix(table) {
    var box = $("[data-key-matrix]");
    box.replaceChildren();
    if (!table) return;
    var copy = table.cloneNode(true);
    copy.querySelectorAll("a").forEach(function (a) { a.replaceWith(document.createTextNode(a.textContent)); });
    box.appendChild(copy);
  }
  root.addEventListener("click", function (e) {
    var td = e.target.closest && e.target.closest("[data-key-matrix] td[data-row][data-col]");
    if (!td) return;
    root.querySelectorAll("[data-key-matrix] td.poll-key").forEach(function (c) { c.classList.remove("poll-key"); });
    td.classList.add("poll-key");
    $("[data-poll-form] [name=answer]").value = td.getAttribute("data-row") + "," + td.getAttribute("data-col");
  });

  root.querySelectorAll("[data-go]").forEach(function (b) {
    b.addEventListener("click", function () {
      var target = targets[b.getAttribute("data-go")];
      if (target) json(api + "/state", "PUT", target).catch(function () {});
    });
  });
  // A lesson, opened for the class from its first step.
  root.querySelectorAll("[data-open-lesson]").forEach(function (b) {
    b.addEventListener("click", function () {
      json(api + "/state", "PUT", { page: b.getAttribute("data-page"), query: b.getAttribute("data-query") })
        .then(function () { b.closest("details").open = false; }).catch(function () {});
    });
  });
  $("[data-ask]").addEventListener("click", function () {
    if (!prepared) return;
    json(api + "/polls/lesson", "POST", Object.assign({ lang: lang }, prepared, shape)).catch(function () {});
  });
  var form = $("[data-poll-form]");
  function kindShown() {
    var kind = form.elements.kind.value;
    form.querySelectorAll("[data-for]").forEach(function (el) { el.hidden = el.getAttribute("data-for") !== kind; });
  }
  form.elements.kind.addEventListener("change", kindShown);
  form.addEventListener("submit", function (e) {
    e.preventDefault();
    var body = { prompt: form.elements.prompt.value, kind: form.elements.kind.value };
    if (body.kind === "choice") {
      body.options = String(form.elements.options.value).split(/[,，]/).map(function (s) { return s.trim(); }).filter(Boolean);
    } else {
      Object.assign(body, shape);
    }
    var key = String(form.elements.answer.value || "").trim();
    if (key) body.answer = key;
    json(api + "/polls", "POST", body)
      .then(function () { form.classList.remove("refused"); form.closest("details").open = false; })
      .catch(function () { form.classList.add("refused"); });
  });

  // ---- answers, live (only here) --------------------------------------------------------------------------
  // The results card comes rendered by the server (templates/_room_results.html, the stream's `poll-html`).
  document.addEventListener("htmx:afterSettle", function () { kit.bars(root); });
  // While a poll is open, "Ask the class" says so instead of asking again (which would close it and start over).
  function showPoll(p) {
    if (p.status === "cleared" && p.id !== pollId) return;
    pollId = p.id;
    var b = $("[data-ask]");
    b.disabled = p.status === "open";
    b.textContent = b.getAttribute(b.disabled ? "data-label-open" : "data-label");
  }
  // Unpairing asks first (on a paired phone it is this phone's role too); the server then says so on that phone.
  var unpair = $("[data-unpair-form]");
  if (unpair) unpair.addEventListener("submit", function (e) {
    if (!window.confirm(unpair.getAttribute("data-confirm"))) e.preventDefault();
  });
  var end = $("[data-end]");
  // Ending from the remote stays on the remote: it says the class has ended (the projector and phones say so too).
  end.addEventListener("submit", function (e) {
    e.preventDefault();
    if (!window.confirm(end.getAttribute("data-confirm"))) return;
    fetch(end.action, { method: "POST", credentials: "same-origin", body: new URLSearchParams(new FormData(end)) })
      .then(showEnded).catch(function () {});
  });

  // The room's events (htmx's SSE extension on <main data-teach>): a stream that reconnects starts with the room as
  // it is then (its view, its open poll); one that fails on a room that is gone has ended.
  document.addEventListener("htmx:sseMessage", function (e) {
    var type = e.detail.type;
    if (type === "state") { var v = JSON.parse(e.detail.data); if (!state || v.version > (state.version || 0)) load(v); }
    else if (type === "poll") showPoll(JSON.parse(e.detail.data));
    else if (type === "end") showEnded();
  });
  document.addEventListener("htmx:sseError", function () { kit.ifGone(api, showEnded); });
  function showEnded() {
    kit.close(root);
    var card = $("[data-results]");
    card.replaceWith(card.cloneNode(false)); // its live results stop asking
    Array.prototype.forEach.call(root.children, function (el) { el.hidden = true; });
    $("[data-ended]").hidden = false;
    $("[data-summary-link]").hidden = false;  // the class's summary stays for its teacher after the end
  }
  kindShown();
})();
