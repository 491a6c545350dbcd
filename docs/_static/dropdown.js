// Fold every admonition with the class "dropdown" (MyST ":class: dropdown") into a
// <details> element: the exercises' solutions stay closed until a reader opens them.
// Plain DOM, no network and no dependency, so the site works offline in a lecture room.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".admonition.dropdown:not(details)").forEach(function (box) {
    var title = box.querySelector(".admonition-title");
    var details = document.createElement("details");
    details.className = box.className;
    var summary = document.createElement("summary");
    summary.innerHTML = title ? title.innerHTML : "Show";
    details.appendChild(summary);
    Array.from(box.childNodes).forEach(function (node) {
      if (node !== title) details.appendChild(node);
    });
    box.replaceWith(details);
  });
});
