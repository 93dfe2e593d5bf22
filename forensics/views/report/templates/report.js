/* hsf report: the checks filter and printing (the explorer is explore.js). Vanilla JS, no network, no dependencies. */
(function () {
  "use strict";
  var root = document.documentElement;
  root.classList.remove("no-js");
  root.classList.add("js");
  var only = document.getElementById("only-problems"), checks = document.getElementById("checks");
  if (only && checks) {
    only.addEventListener("change", function () { checks.classList.toggle("only-problems", only.checked); });
  }
  window.addEventListener("beforeprint", function () {
    Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) { d.open = true; });
  });
}());
