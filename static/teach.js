// The teacher's remote (/r/<code>/teach): steps the class by announcing a view the page the class sees offers (its
// controls, rendered by that page for the remote: templates/_remote.html, app/web/remote.py; a button's view is its
// data-page and data-query), asks a lesson's prepared question or the teacher's own, shows the live histogram and the
// key (which the projector does not), reveals and ends. The projector follows the room's state like a student's
// phone does (static/room.js). The room's events come over htmx's SSE extension (templates/room_teach.html).
(function () {
  "use strict";
  var root = document.querySelector("[data-teach]");
  if (!root) return;
  var code = root.getAttribute("data-code"), lang = root.getAttribute("data-lang");
  var api = "/api/v1/rooms/" + code;
  var kit = window.labRoomKit, json = kit.json;
  var state = null, pollId = null, prepared = null, shape = {}, now = root.querySelector(".teach-now");

  function $(sel) { return root.querySelector(sel); }
  function each(sel, fn) { root.querySelectorAll(sel).forEach(fn); }
  function announce(view) { return json(api + "/state", "PUT", view); }
  // A cell ("row,col") by its tokens (static/room-kit.js): the labels the poll was asked with, or before it is
  // asked, those of the matrix the class sees.
  function cellLabel(v, p) { return kit.tokensOf(v, (p || shape).row_labels, (p || shape).col_labels); }

  // ---- the controls of the page the class sees, as that page renders them for the remote --------------------
  function load(view) {
    state = view;
    var p = new URLSearchParams(view.query);
    p.set("lang", lang);
    window.htmx.ajax("GET", view.page + "?" + p.toString(), { source: now, target: now, swap: "innerHTML", headers: { "X-Lab-Remote": "1" } });
  }
  now.addEventListener("htmx:afterSettle", function () {
    var box = $("[data-remote-now]"), lesson = box.getAttribute("data-lesson");
    shape = JSON.parse(box.getAttribute("data-shape") || "{}");
    // While a lesson runs, its steps are the remote's first pair; the page's own steps stay below, smaller.
    root.toggleAttribute("data-lesson-running", !!lesson);
    var chosen = $("[data-cell-matrices] button[aria-pressed=true]");
    if (chosen) chooseMatrix(chosen);
    prepared = null;
    $("[data-prepared]").hidden = true;
    if (lesson) {
      var ask = { lesson: lesson, step: Number(box.getAttribute("data-step")) };
      json(api + "/polls/lesson?lesson=" + encodeURIComponent(ask.lesson) + "&step=" + ask.step + "&lang=" + lang)
        .then(function (p) { prepared = ask; showPrepared(p); }).catch(function () {});
    }
  });
  // A button with a view announces it to the class (a lesson opened from its first step closes its list).
  root.addEventListener("click", function (e) {
    var b = e.target.closest("button[data-page]:not([data-cell-matrix])");
    if (!b) return;
    announce({ page: b.getAttribute("data-page"), query: b.getAttribute("data-query") })
      .then(function () { var d = b.closest("details[data-lessons]"); if (d) d.open = false; }).catch(function () {});
  });
  // A cell of the stage's matrix: a small matrix is a grid of its cells; a larger one, a row and a column to type.
  // Several matrices on the stage (Q, K, V): a button each, the one with the open cell (or X, or the result) first.
  function chooseMatrix(b) {
    var small = b.getAttribute("data-small") === "1", name = b.getAttribute("data-cell-matrix"), form = $("[data-cell-form]");
    each("[data-cell-matrices] button", function (x) { x.setAttribute("aria-pressed", String(x === b)); });
    each("[data-cell-grid] table", function (t) { t.hidden = t.getAttribute("data-cell-table") !== name; });
    each("[data-cell-hint]", function (h) { h.hidden = h.getAttribute("data-cell-hint") !== (small ? "grid" : "form"); });
    form.hidden = small;
    ["row", "col"].forEach(function (k) {
      var input = form.elements[k], first = Number(b.getAttribute("data-" + k + "0"));
      input.min = first;
      input.max = first + Number(b.getAttribute("data-" + k + "s")) - 1;
      input.value = b.getAttribute("data-picked-" + k) || input.value;
      input.placeholder = input.min + "–" + input.max;
    });
  }
  root.addEventListener("click", function (e) {
    var b = e.target.closest("[data-cell-matrices] button");
    if (b) chooseMatrix(b);
  });
  root.addEventListener("submit", function (e) {
    if (!e.target.matches("[data-cell-form]")) return;
    e.preventDefault();
    var f = e.target, b = $("[data-cell-matrices] button[aria-pressed=true]"), at = {}, ok = !!b;
    ["row", "col"].forEach(function (k) {
      var v = Number(f.elements[k].value);
      ok = ok && v >= Number(f.elements[k].min) && v <= Number(f.elements[k].max);
      at[k] = b && v - Number(b.getAttribute("data-" + k + "0"));
    });
    f.classList.toggle("refused", !ok);
    if (!ok) return;
    var q = new URLSearchParams(b.getAttribute("data-query"));
    q.set("cell", [b.getAttribute("data-cell-matrix"), b.getAttribute("data-cell-head"), at.row, at.col].join("."));
    announce({ page: b.getAttribute("data-page"), query: q.toString() }).catch(function () {});
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
  root.addEventListener("click", function (e) {
    var td = e.target.closest && e.target.closest("[data-key-matrix] td[data-row][data-col]");
    if (!td) return;
    root.querySelectorAll("[data-key-matrix] td.poll-key").forEach(function (c) { c.classList.remove("poll-key"); });
    td.classList.add("poll-key");
    $("[data-poll-form] [name=answer]").value = td.getAttribute("data-row") + "," + td.getAttribute("data-col");
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
