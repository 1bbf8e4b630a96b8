// transfer-gate history: the page's script, inlined into index.html (gate/report/history_page.py).
// Shows a point's text on hover and keyboard focus (arrow keys, Home, End, PageUp, PageDown move
// along a chart), and fills a region's table when it is opened. Every figure's text is written
// by the gate, in #history-data: nothing here formats a number.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("history-data").textContent);
  var tip = document.getElementById("tip");

  function region(svg) { return data.regions[Number(svg.dataset.region)]; }
  function num(svg, key) { return Number(svg.dataset[key]); }

  // The x of a run: the runs are spread evenly over the plot, in commit order.
  function xOf(svg, run) {
    var n = num(svg, "runs"), width = num(svg, "width");
    return num(svg, "left") + (n === 1 ? width / 2 : width * run / (n - 1));
  }

  // "0-41,57" as [0, 1, ..., 41, 57]: the runs of a line's corners.
  function expand(ranges) {
    var runs = [];
    ranges.split(",").forEach(function (part) {
      var ends = part.split("-").map(Number);
      for (var r = ends[0]; r <= ends[ends.length - 1]; r++) { runs.push(r); }
    });
    return runs;
  }

  // The text of point i of a series, or null where that run did not measure it.
  function label(key, i) {
    var entry = data.labels[key], at = entry[1][i];
    return at < 0 ? null : entry[0][at];
  }

  // The y of the first line at a run: its corner there, or the flat stretch's it lies on.
  function yOf(svg, run) {
    var paths = svg.querySelectorAll("path.line.s0");
    for (var k = 0; k < paths.length; k++) {
      var runs = expand(paths[k].dataset.runs);
      if (run < runs[0] || run > runs[runs.length - 1]) { continue; }
      var corner = 0;
      while (corner + 1 < runs.length && runs[corner + 1] <= run) { corner++; }
      var xy = paths[k].getAttribute("d").slice(1).split(" L")[corner];
      return Number(xy.split(",")[1]);
    }
    return null;
  }

  function describe(svg, i) {
    var points = region(svg), run = points.runs[i], r = data.runs[run];
    var lines = [r[0] + "  " + r[2].slice(0, 10) + "  " + points.statuses[i]];
    for (var s = 0; s < num(svg, "series"); s++) {
      var path = svg.querySelector("path.line.s" + s);
      var text = label(svg.id + "-" + s, i);
      lines.push((path ? path.dataset.label : "series " + s) + ": " +
        (text === null ? "not measured" : text));
    }
    var machine = points.machines[i];
    if (machine >= 0) { lines.push("machine " + (machine + 1) + ": " + data.machines[machine]); }
    return lines.join("\n");
  }

  function show(svg, i) {
    var points = region(svg);
    i = Math.max(0, Math.min(points.runs.length - 1, i));
    svg.dataset.at = i;
    var run = points.runs[i], x = xOf(svg, run), y = yOf(svg, run);
    if (y === null) { y = num(svg, "top") + num(svg, "height"); }
    var cursor = svg.querySelector(".cursor");
    cursor.setAttribute("cx", x);
    cursor.setAttribute("cy", y);
    tip.textContent = describe(svg, i);
    tip.hidden = false;
    var box = svg.getBoundingClientRect(), scale = box.width / svg.viewBox.baseVal.width;
    tip.style.left = (window.scrollX + box.left + x * scale + 12) + "px";
    tip.style.top = (window.scrollY + box.top + y * scale + 12) + "px";
  }

  function nearest(svg, event) {
    var box = svg.getBoundingClientRect(), scale = svg.viewBox.baseVal.width / box.width;
    var x = (event.clientX - box.left) * scale, runs = region(svg).runs;
    var best = 0, distance = Infinity;
    for (var i = 0; i < runs.length; i++) {
      var d = Math.abs(xOf(svg, runs[i]) - x);
      if (d < distance) { distance = d; best = i; }
    }
    return best;
  }

  document.querySelectorAll("svg.chart").forEach(function (svg) {
    svg.addEventListener("mousemove", function (event) { show(svg, nearest(svg, event)); });
    svg.addEventListener("mouseleave", function () { tip.hidden = true; });
    svg.addEventListener("focus", function () {
      show(svg, svg.dataset.at === undefined ? region(svg).runs.length - 1 : Number(svg.dataset.at));
    });
    svg.addEventListener("blur", function () { tip.hidden = true; });
    svg.addEventListener("keydown", function (event) {
      var i = Number(svg.dataset.at || 0), n = region(svg).runs.length;
      var to = {ArrowLeft: i - 1, ArrowRight: i + 1, Home: 0, End: n - 1,
        PageUp: i - 10, PageDown: i + 10}[event.key];
      if (to !== undefined) { event.preventDefault(); show(svg, to); }
    });
  });

  // A region's table, built when it is first opened: a page of 1,000 commits stays light.
  document.querySelectorAll("details[data-region]").forEach(function (details) {
    details.addEventListener("toggle", function () {
      var box = details.querySelector(".scroll");
      if (!details.open || box.firstChild) { return; }
      var points = data.regions[Number(details.dataset.region)];
      var svgs = details.parentNode.querySelectorAll("svg.chart");
      var table = document.createElement("table"), head = table.createTHead().insertRow();
      var keys = [];
      function heading(text) {
        var th = document.createElement("th");
        th.scope = "col";
        th.textContent = text;
        head.appendChild(th);
      }
      heading("Commit");
      heading("Date");
      heading("Status");
      svgs.forEach(function (svg) {
        for (var s = 0; s < num(svg, "series"); s++) {
          var path = svg.querySelector("path.line.s" + s);
          heading(path ? path.dataset.label : svg.id + "-" + s);
          keys.push(svg.id + "-" + s);
        }
      });
      var body = table.createTBody();
      points.runs.forEach(function (run, i) {
        var row = body.insertRow(), r = data.runs[run];
        row.insertCell().textContent = r[0];
        row.insertCell().textContent = r[2];
        row.insertCell().textContent = points.statuses[i];
        keys.forEach(function (key) {
          var text = label(key, i);
          row.insertCell().textContent = text === null ? "" : text;
        });
      });
      box.appendChild(table);
    });
  });
})();
