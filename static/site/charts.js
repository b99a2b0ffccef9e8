/* Draws the pages' charts: each <div class="aiperf-chart"> carries its plotly figure (data-figure),
   its config (data-config) and its height in pixels (data-height), written by leaderboard/site/charts.py.
   Kept out of the templates so that the pages need no inline script (Content-Security-Policy). */
"use strict";
(function () {
  function draw(el) {
    var figure = JSON.parse(el.dataset.figure);
    var config = JSON.parse(el.dataset.config || "{}");
    el.style.height = (parseInt(el.dataset.height, 10) || 360) + "px";
    el.style.width = "100%";
    window.Plotly.newPlot(el, figure.data, figure.layout, config);
  }
  function drawAll() {
    document.querySelectorAll("div.aiperf-chart[data-figure]").forEach(draw);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
