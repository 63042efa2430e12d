// Facet change form: as the operator edits, POST the form to the preview endpoint and show the
// services' validation messages under each field, or the discovery document and agent card as
// they would be served after saving. Nothing is saved here; without JS the form works as before.
(function () {
  "use strict";
  function ready(fn) {
    if (document.readyState !== "loading") { fn(); } else { document.addEventListener("DOMContentLoaded", fn); }
  }
  ready(function () {
    var form = document.getElementById("facet_form");
    var panel = document.querySelector(".served-preview");
    if (!form || !panel) { return; }
    var status = document.getElementById("preview-status");
    var discovery = document.getElementById("preview-discovery");
    var card = document.getElementById("preview-card");
    var timer = null;
    var sequence = 0;

    function clearErrors() {
      form.querySelectorAll(".live-errors").forEach(function (node) { node.remove(); });
    }

    function showErrors(errors) {
      Object.keys(errors).forEach(function (field) {
        var row = form.querySelector(".field-" + field) || form;
        var list = document.createElement("ul");
        list.className = "errorlist live-errors";
        list.setAttribute("role", "alert");
        list.dataset.field = field;
        errors[field].forEach(function (message) {
          var item = document.createElement("li");
          item.textContent = message;
          list.appendChild(item);
        });
        row.insertBefore(list, row.firstChild);
      });
    }

    function preview() {
      var mine = ++sequence;
      status.textContent = "Checking…";
      fetch(panel.dataset.previewUrl, { method: "POST", body: new FormData(form), credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (result) {
          if (mine !== sequence) { return; }
          clearErrors();
          var fields = Object.keys(result.errors || {});
          if (fields.length) {
            showErrors(result.errors);
            status.textContent = "Not valid: saving would be refused (" + fields.join(", ") + ").";
            panel.classList.add("invalid");
            return;
          }
          panel.classList.remove("invalid");
          discovery.textContent = JSON.stringify(result.discovery, null, 2);
          card.textContent = JSON.stringify(result.agentCard, null, 2);
          status.textContent = "Preview of what will be served after saving (not saved yet).";
        })
        .catch(function (error) {
          if (mine === sequence) { status.textContent = "Preview unavailable: " + error.message; }
        });
    }

    function schedule() {
      window.clearTimeout(timer);
      timer = window.setTimeout(preview, 300);
    }
    form.addEventListener("input", schedule);
    form.addEventListener("change", schedule);
  });
})();
