// The console's little JS: live run status over SSE, a refresh of a task's deliveries while they
// are still moving, and a copy button for a new key. Every page works without it.
(function () {
  "use strict";
  var TERMINAL = ["completed", "failed", "cancelled"];
  var MAX_STREAMS = 4;

  function follow(node) {
    var source = new EventSource(node.dataset.statusStream);
    source.addEventListener("status", function (message) {
      var data = JSON.parse(message.data);
      node.textContent = data.status;
      node.className = "status status-" + data.status;
      if (TERMINAL.indexOf(data.status) !== -1) { source.close(); }
    });
  }

  // The server marks the container while the task runs or a delivery is pending
  // (data-refresh-while-running non-empty); each refresh takes the fresh mark, so a finished
  // task's page is never refetched and a running one stops once it settles.
  function refreshDeliveries(container) {
    var rounds = 0;
    function stop() { container.dataset.refreshState = "settled"; }
    function tick() {
      if (rounds++ > 60 || !container.dataset.refreshWhileRunning) { stop(); return; }
      fetch(window.location.href, { credentials: "same-origin" })
        .then(function (response) { return response.text(); })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(container.id);
          if (!fresh) { stop(); return; }  // the task is gone (the not-found page)
          container.innerHTML = fresh.innerHTML;
          container.dataset.refreshWhileRunning = fresh.dataset.refreshWhileRunning || "";
          window.setTimeout(tick, 1500);
        })
        .catch(function () { window.setTimeout(tick, 3000); });
    }
    if (container.dataset.refreshWhileRunning) { window.setTimeout(tick, 1000); } else { stop(); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    // A browser keeps about six connections per host: follow a few runs, leave the rest to a reload.
    Array.prototype.slice.call(document.querySelectorAll("[data-status-stream]"), 0, MAX_STREAMS).forEach(follow);
    var deliveries = document.getElementById("task-deliveries");
    if (deliveries) { refreshDeliveries(deliveries); }
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
