// What a class's screens (static/room.js) and the teacher's remote (static/teach.js) share: a view without what
// belongs to one screen, the matrix a cell question is about, the rooms API's JSON, the end of the room's stream and
// growing pauses. The room's event stream is htmx's SSE extension's.
window.labRoomKit = (function () {
  "use strict";
  var PERSONAL = ["lang", "present", "room"];

  // A link's view (path + query) without what belongs to one screen alone (its language, presenter mode).
  function asView(href) {
    var u = new URL(href, location.href);
    PERSONAL.forEach(function (k) { u.searchParams.delete(k); });
    return { page: u.pathname, query: u.searchParams.toString() };
  }
  function sameView(a, b) {
    var pa = new URLSearchParams(a.query), pb = new URLSearchParams(b.query);
    pa.sort(); pb.sort();
    return a.page === b.page && pa.toString() === pb.toString();
  }

  // The matrix a cell question is about (the page's first): its shape and labels (tokens; none for a window).
  function matrixShape(table) {
    if (!table) return {};
    var out = { rows: table.querySelectorAll("tbody tr").length, cols: table.querySelectorAll("tbody tr:first-child td").length };
    var first = table.querySelector("td[data-row][data-col]"), heads = table.querySelectorAll("thead th[scope=col]");
    if (!first || first.getAttribute("data-row") !== "0" || first.getAttribute("data-col") !== "0" || heads.length !== out.cols) return out;
    var label = function (el) { return ((el && el.textContent) || "").trim().slice(0, 64); };
    out.row_labels = Array.prototype.map.call(table.querySelectorAll("tbody tr"), function (tr) { return label(tr.querySelector("th")); });
    out.col_labels = Array.prototype.map.call(heads, label);
    return out;
  }

  function json(url, method, body) {
    return fetch(url, {
      method: method || "GET", credentials: "same-origin",
      headers: body ? { "Content-Type": "application/json" } : {}, body: body ? JSON.stringify(body) : undefined
    }).then(function (res) { return res.ok ? (res.status === 204 ? null : res.json()) : Promise.reject(res.status); });
  }

  // The room's event stream on `el` (htmx's SSE extension) closed for good: no reconnects, as the class has ended.
  function close(el) {
    if (!el || !window.htmx) return;
    el.removeAttribute("sse-connect");
    window.htmx.trigger(el, "htmx:beforeCleanupElement"); // the extension closes the stream of an element it cleans up
  }
  // A stream that failed: `then()` when the room is gone (it has ended), nothing while it is only unreachable.
  function ifGone(api, then) {
    json(api).catch(function (status) { if (status === 404) then(); });
  }

  // Growing pauses: 1 s, 2 s, 4 s … 30 s, jittered, never sooner than `minSeconds` (a Retry-After).
  function backoff(attempt, minSeconds) {
    var ms = Math.min(30000, 1000 * Math.pow(2, attempt)) * (0.75 + Math.random() / 2);
    return Math.max(ms, (minSeconds || 0) * 1000);
  }

  return { asView: asView, sameView: sameView, matrixShape: matrixShape, json: json, backoff: backoff,
           close: close, ifGone: ifGone };
})();
