// Mark every .sb-scroll box whose content is wider than the column, so its hint shows.
(function () {
  function mark() {
    document.querySelectorAll(".sb-scroll").forEach(function (el) {
      el.classList.toggle("sb-overflowing", el.scrollWidth > el.clientWidth + 1);
    });
  }
  window.specbenchMarkOverflow = mark;
  window.addEventListener("load", mark);
  window.addEventListener("resize", mark);
})();
