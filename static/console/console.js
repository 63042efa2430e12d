// The console's little JS: live run status over SSE, a run page re-rendered at each of its events,
// new runs added to the runs list without a reload, a refresh of deliveries while they are still
// moving, and a copy button for a new key. Every page works without it (a reload shows the same).
(function () {
  "use strict";
  var TERMINAL = ["completed", "failed", "cancelled"];
  // A browser keeps about six connections per host: a few streams, and room for the page's fetches.
  var MAX_STREAMS = 4;
  var streams = 0;

  function fetchPage(url) {
    return fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (response) {
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.text();
    });
  }

  function openStream(url, onStatus) {
    if (streams >= MAX_STREAMS) { return null; }
    streams += 1;
    var source = new EventSource(url);
    var closed = false;
    function close() { if (!closed) { closed = true; streams -= 1; source.close(); } }
    source.addEventListener("status", function (message) {
      var data = JSON.parse(message.data);
      onStatus(data, close);
      if (TERMINAL.indexOf(data.status) !== -1) { close(); }
    });
    return close;
  }

  function follow(node) {
    var close = openStream(node.dataset.statusStream, function (data) {
      node.textContent = data.status;
      node.className = "status status-" + data.status;
    });
    if (close) { node.dataset.following = "1"; }
  }

  // The server marks the container while the task runs or a delivery is pending
  // (data-refresh-while-running non-empty); each refresh takes the fresh mark, so a finished
  // task's page is never refetched and a running one stops once it settles. The container is
  // looked up by id at each round: the run page may have re-rendered it meanwhile.
  var refreshing = {};
  function refreshDeliveries(id) {
    if (refreshing[id]) { return; }
    var rounds = 0;
    function current() { return document.getElementById(id); }
    function stop() {
      refreshing[id] = false;
      var node = current();
      if (node) { node.dataset.refreshState = "settled"; }
    }
    function tick() {
      var container = current();
      if (!container || rounds++ > 60 || !container.dataset.refreshWhileRunning) { stop(); return; }
      fetchPage(window.location.href)
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
          var node = current();
          if (!fresh || !node) { stop(); return; }  // the task is gone (the not-found page)
          node.innerHTML = fresh.innerHTML;
          node.dataset.refreshWhileRunning = fresh.dataset.refreshWhileRunning || "";
          window.setTimeout(tick, 1500);
        })
        .catch(function () { window.setTimeout(tick, 3000); });
    }
    var container = current();
    if (container && container.dataset.refreshWhileRunning) {
      refreshing[id] = true;
      window.setTimeout(tick, 1000);
    } else { stop(); }
  }

  // The run page: while the run is live, each event on its stream re-renders #run-live from a
  // fresh copy of the page (the server renders and escapes everything; nothing is built here).
  function followRun(container) {
    var pending = null;
    var close = null;
    function render() {
      pending = null;
      fetchPage(window.location.href)
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(container.id);
          if (!fresh) { if (close) { close(); } return; }
          container.innerHTML = fresh.innerHTML;
          container.dataset.runStream = fresh.dataset.runStream || "";
          container.dataset.renders = String(Number(container.dataset.renders || 0) + 1);
          if (!container.dataset.runStream && close) { close(); }
          refreshDeliveries("run-deliveries");
        })
        .catch(function () { pending = pending || window.setTimeout(render, 2000); });
    }
    close = openStream(container.dataset.runStream, function (data, closeNow) {
      // The terminal event closes the stream (openStream); the render still shows it.
      if (!pending) { pending = window.setTimeout(render, 200); }
      close = closeNow;
    });
  }

  // The runs list: poll its rows fragment (same filters), add the runs not shown yet on top, and
  // take the fresh copy of a shown row whose status no stream follows (past MAX_STREAMS).
  function pollRows(body) {
    var rounds = 0;
    function tick() {
      if (rounds++ > 600) { return; }  // half an hour of a tab left open; a reload starts again
      if (document.hidden) { window.setTimeout(tick, 3000); return; }
      fetchPage(body.dataset.rowsPoll)
        .then(function (html) {
          var fresh = document.createElement("tbody");
          fresh.innerHTML = html;
          var shown = {};
          body.querySelectorAll("tr[data-run-id]").forEach(function (row) { shown[row.dataset.runId] = row; });
          var added = Array.prototype.filter.call(fresh.querySelectorAll("tr[data-run-id]"), function (row) {
            var old = shown[row.dataset.runId];
            if (old && !old.querySelector("[data-following]")) { old.innerHTML = row.innerHTML; }
            return !old;
          });
          if (added.length) {
            var empty = body.querySelector("tr.empty");
            if (empty) { empty.remove(); }
            added.reverse().forEach(function (row) {  // newest ends on top
              body.insertBefore(row, body.firstChild);
              var status = row.querySelector("[data-status-stream]");
              if (status) { follow(status); }
            });
          }
          window.setTimeout(tick, 3000);
        })
        .catch(function () { window.setTimeout(tick, 6000); });
    }
    window.setTimeout(tick, 3000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var run = document.getElementById("run-live");
    if (run && run.dataset.runStream) { followRun(run); }
    document.querySelectorAll("[data-status-stream]").forEach(follow);  // up to MAX_STREAMS
    ["task-deliveries", "run-deliveries"].forEach(function (id) {
      if (document.getElementById(id)) { refreshDeliveries(id); }
    });
    var rows = document.getElementById("runs-rows");
    if (rows && rows.dataset.rowsPoll) { pollRows(rows); }
    document.querySelectorAll("[data-copy]").forEach(function (button) {
      button.addEventListener("click", function () {
        var input = document.getElementById(button.dataset.copy);
        input.select();
        if (navigator.clipboard) { navigator.clipboard.writeText(input.value).catch(function () {}); }
        button.textContent = "Copied";
      });
    });
  });
})();
