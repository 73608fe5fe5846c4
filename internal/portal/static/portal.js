// The portal's only script: copy buttons and the filter box. Loaded from the portal itself
// (CSP script-src 'self'); every page works without it.
"use strict";
document.addEventListener("click", function (ev) {
  var btn = ev.target.closest("button.copy");
  if (!btn) return;
  var input = document.getElementById(btn.getAttribute("data-copy"));
  if (!input) return;
  input.select();
  var done = function () {
    var was = btn.textContent;
    btn.textContent = "Copied";
    setTimeout(function () { btn.textContent = was; }, 1500);
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(input.value).then(done, function () { document.execCommand("copy"); done(); });
  } else {
    document.execCommand("copy");
    done();
  }
});

// The endpoint form's filter box: checked while it is typed, by the portal
// with the check a save makes, and tested in place by the Test filter
// button. Without the script the form still works: a save names the
// filter's mistake, and the button posts the form and shows its answer.
(function () {
  var box = document.getElementById("filter");
  if (!box || !box.form || !window.fetch || !window.FormData || !window.URLSearchParams) return;
  var form = box.form;
  var live = document.getElementById("filter-live");
  var btn = document.getElementById("filter-test");
  var out = document.getElementById("filter-result");
  var timer = null, seq = 0;
  var post = function (url) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      body: new URLSearchParams(new FormData(form)),
      headers: { Accept: "application/json" }
    }).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    });
  };
  var check = function () {
    var n = ++seq;
    post(box.getAttribute("data-check")).then(function (res) {
      if (n !== seq) return; // a later check is on its way
      if (res.ok) {
        box.removeAttribute("aria-invalid");
        live.textContent = box.value.trim() === "" ? "" : "Valid filter.";
        live.className = "help filter-live good";
        return;
      }
      box.setAttribute("aria-invalid", "true");
      live.textContent = res.problems.map(function (p) { return p.text; }).join("; ");
      live.className = "help filter-live bad";
    }, function () {
      if (n === seq) { live.textContent = ""; live.className = "help filter-live"; }
    });
  };
  var later = function () {
    clearTimeout(timer);
    timer = setTimeout(check, 250);
  };
  box.addEventListener("input", later);
  form.addEventListener("change", function (ev) {
    if (ev.target.name === "event_types" || ev.target.id === "event_types_other") later();
  });
  if (!btn || !out) return;
  btn.addEventListener("click", function (ev) {
    ev.preventDefault();
    out.textContent = "Testing…";
    out.className = "filter-result";
    post(btn.getAttribute("formaction")).then(function (res) {
      out.textContent = res.text;
      out.className = "filter-result " + (res.good ? "good" : "bad");
    }, function () {
      out.textContent = "The test could not be run; try again.";
      out.className = "filter-result bad";
    });
  });
})();
