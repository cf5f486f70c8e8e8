// The teacher's remote (/r/<code>/teach): the server renders what it shows (templates/_remote.html, _room_prepared.html,
// _room_results.html, and the stream's `now` loads the class's page). Here: views announced, questions asked, a cell chosen.
(function () {
  "use strict";
  var root = document.querySelector("[data-teach]");
  if (!root) return;
  var api = "/api/v1/rooms/" + root.getAttribute("data-code"), kit = window.labRoomKit, json = kit.json;
  var form = root.querySelector("[data-poll-form]");

  function $(sel) { return root.querySelector(sel); }
  function each(sel, fn) { root.querySelectorAll(sel).forEach(fn); }
  function announce(page, query) { json(api + "/state", "PUT", { page: page, query: query }).catch(function () {}); }

  root.addEventListener("click", function (e) {
    var b = e.target.closest("button"), td = e.target.closest("[data-key-matrix] td[data-row]");
    if (b && b.hasAttribute("data-cell-matrix")) { // a matrix of the stage: its grid of cells, or its row and column
      var name = b.getAttribute("data-cell-matrix");
      each("[data-cell-matrices] button", function (x) { x.setAttribute("aria-pressed", String(x === b)); });
      each("[data-cell-for]", function (el) { el.hidden = el.getAttribute("data-cell-for").split(" ").indexOf(name) < 0; });
    } else if (b && b.hasAttribute("data-page")) { // a view, announced (a lesson opened from its start closes the list)
      announce(b.getAttribute("data-page"), b.getAttribute("data-query"));
      if (b.closest("details[data-lessons]")) b.closest("details").open = false;
    } else if (b && b.hasAttribute("data-ask")) { // a lesson step's prepared question
      json(api + "/polls/lesson", "POST", JSON.parse(b.getAttribute("data-ask"))).catch(function () {});
    } else if (td) { // a cell poll's key, picked on the copy of the class's matrix
      each("[data-key-matrix] td.poll-key", function (c) { c.classList.remove("poll-key"); });
      td.classList.add("poll-key");
      form.elements.answer.value = td.getAttribute("data-row") + "," + td.getAttribute("data-col");
    }
  });
  root.addEventListener("submit", function (e) {
    var f = e.target;
    if (!f.hasAttribute("data-cell-form")) return;
    e.preventDefault(); // a cell by its row and column, which the browser checked against the matrix (min, max)
    var q = new URLSearchParams(f.getAttribute("data-query"));
    q.set("cell", [f.getAttribute("data-cell"), f.elements.row.value - f.elements.row.min, f.elements.col.value - f.elements.col.min].join("."));
    announce(f.getAttribute("data-page"), q.toString());
  });

  // The teacher's own question (fields by kind: lab.css), posted by htmx (templates/room_teach.html): opened, it folds.
  form.addEventListener("htmx:afterRequest", function (e) { if (e.detail.xhr.status === 201) form.closest("details").open = false; });

  // After a swap (a running lesson's steps lead: lab.css): while a poll is open, "Ask the class" says so (no button).
  document.addEventListener("htmx:afterSettle", function () {
    var ask = $("[data-ask]"), open = !!$("[data-results][data-open]");
    if (!ask) return; // its card is on its way (/r/<code>/prepared)
    ask.disabled = open;
    ask.textContent = ask.getAttribute(open ? "data-label-open" : "data-label");
  });

  // The room's end (or a stream failing on a room that is gone). Its `now` loads a new view's controls by itself.
  document.addEventListener("htmx:sseMessage", function (e) { if (e.detail.type === "end") ended(); });
  document.addEventListener("htmx:sseError", function () { kit.ifGone(api, ended); });
  function ended() { // one line, and the class summary, which stays for its teacher
    var card = $("[data-results]");
    kit.close(root);
    if (card) card.remove(); // its live results stop asking
    Array.prototype.forEach.call(root.children, function (el) { el.hidden = !el.matches("[data-ended], [data-summary-link]"); });
  }
})();
