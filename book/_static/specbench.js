// Wide figures and tables scroll inside the text column and say so (.sb-scroll boxes come from
// specbench.charts and specbench.tables; any other output table is given one here).
(function () {
  var HINT = "wider than the page: scroll sideways →";
  function wrapBareTables() {
    document.querySelectorAll(".cell_output table").forEach(function (table) {
      if (table.closest(".sb-scroll")) return;
      var box = document.createElement("div");
      box.className = "sb-scroll";
      var hint = document.createElement("p");
      hint.className = "sb-scroll-hint";
      hint.textContent = HINT;
      table.parentNode.insertBefore(box, table);
      box.appendChild(hint);
      box.appendChild(table);
    });
  }
  function mark() {
    document.querySelectorAll(".sb-scroll").forEach(function (el) {
      el.classList.toggle("sb-overflowing", el.scrollWidth > el.clientWidth + 1);
    });
  }
  window.specbenchMarkOverflow = mark;
  document.addEventListener("DOMContentLoaded", wrapBareTables);
  window.addEventListener("load", function () { wrapBareTables(); mark(); });
  window.addEventListener("resize", mark);
})();
