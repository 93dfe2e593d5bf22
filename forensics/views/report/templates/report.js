/* hsf report: the static sample browser and the checks filter. Vanilla JS, no network, no dependencies. */
(function () {
  "use strict";
  var root = document.documentElement;
  root.classList.remove("no-js");
  root.classList.add("js");
  var select = document.getElementById("sample-select");
  var panels = Array.prototype.slice.call(document.querySelectorAll(".sample-panel"));
  var pos = document.getElementById("sample-pos");
  function show(k) {
    k = Math.max(0, Math.min(panels.length - 1, Number(k) || 0));
    panels.forEach(function (p) { p.hidden = p.getAttribute("data-k") !== String(k); });
    if (select) { select.value = String(k); }
    if (pos) { pos.textContent = (k + 1) + " / " + panels.length; }
  }
  if (select && panels.length) {
    select.addEventListener("change", function () { show(select.value); });
    var prev = document.getElementById("sample-prev"), next = document.getElementById("sample-next");
    if (prev) { prev.addEventListener("click", function () { show(Number(select.value) - 1); }); }
    if (next) { next.addEventListener("click", function () { show(Number(select.value) + 1); }); }
    show(0);
  }
  var only = document.getElementById("only-problems"), checks = document.getElementById("checks");
  if (only && checks) {
    only.addEventListener("change", function () { checks.classList.toggle("only-problems", only.checked); });
  }
  window.addEventListener("beforeprint", function () {
    Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) { d.open = true; });
  });
}());
