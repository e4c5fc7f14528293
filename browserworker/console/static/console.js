/* browserworker console: live refresh, confirm dialogs, select-all. No dependencies.
   A region with data-refresh="URL" data-every="SECONDS" is re-fetched (header X-Refresh: 1,
   the server answers with the region alone) unless someone is typing or has selected
   something in it. A form with data-confirm="question" asks before it is sent. */
(function () {
  "use strict";

  function busy(region) {
    if (region.dataset.dirty === "1") { return true; }
    var active = document.activeElement;
    return Boolean(active && region.contains(active) && active.matches("input, textarea, select"));
  }

  function refresh(region) {
    var every = Number(region.dataset.every || 0) * 1000;
    if (!every) { return; }
    window.setTimeout(function tick() {
      if (document.hidden || busy(region)) { window.setTimeout(tick, every); return; }
      fetch(region.dataset.refresh, { headers: { "X-Refresh": "1" }, credentials: "same-origin" })
        .then(function (r) { if (!r.ok || r.redirected) { throw new Error(String(r.status)); } return r.text(); })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById(region.id);
          if (fresh && !busy(region)) { region.replaceChildren.apply(region, Array.from(fresh.childNodes)); }
          window.setTimeout(tick, every);
        })
        .catch(function () { window.setTimeout(tick, every * 2); });
    }, every);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target.closest("form[data-confirm]");
    if (form && !window.confirm(form.dataset.confirm)) { event.preventDefault(); }
  });
  document.addEventListener("input", function (event) {
    var region = event.target.closest("[data-refresh]");
    if (region) { region.dataset.dirty = "1"; }
  });
  document.addEventListener("change", function (event) {
    var all = event.target.closest("input[data-select-all]");
    if (all) {
      all.form.querySelectorAll('input[type=checkbox][name="' + all.dataset.selectAll + '"]')
        .forEach(function (box) { box.checked = all.checked; });
    }
  });
  document.querySelectorAll("[data-refresh]").forEach(refresh);
}());
