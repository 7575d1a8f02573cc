// Progressive enhancement only: every page works without JavaScript. With
// it, a checkbox in the header reloads the page every five seconds; the
// choice is kept in localStorage.
(function () {
  var box = document.getElementById("autorefresh");
  if (!box) return;
  box.parentNode.hidden = false;
  var key = "fencegate.autorefresh", timer = null;
  function apply() {
    if (timer) { clearTimeout(timer); timer = null; }
    if (box.checked) timer = setTimeout(function () { location.reload(); }, 5000);
  }
  try { box.checked = localStorage.getItem(key) === "1"; } catch (e) {}
  box.addEventListener("change", function () {
    try { localStorage.setItem(key, box.checked ? "1" : "0"); } catch (e) {}
    apply();
  });
  apply();
})();
