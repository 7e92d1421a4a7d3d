// The approvals queue refreshes itself (htmx swaps #queue every few seconds). A
// reviewer keeps their place: htmx gives the focus back to the same row's link (each
// has an id); if that row left, the focus goes to the row now in its place (or the
// last one, or the queue's message when it is empty). What changed is said once, in a
// short status ("1 removed, 8 waiting"), not by reading the whole table again.
(function () {
  "use strict";
  let before = null;

  function rows() {
    return Array.from(document.querySelectorAll("#queue tr[id]"));
  }

  // Everything waiting, shown or not: the queue shows only its oldest rows.
  function total() {
    const queue = document.getElementById("queue");
    return queue ? Number(queue.dataset.total) : 0;
  }

  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }

  document.body.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.target.id !== "queue") return;
    const focused = document.activeElement;
    const row = focused && focused.closest ? focused.closest("#queue tr[id]") : null;
    before = { ids: rows().map((r) => r.id), at: row ? rows().indexOf(row) : -1, total: total() };
  });

  document.body.addEventListener("htmx:afterSettle", function (event) {
    if (!before || !document.getElementById("queue")) return;
    const now = rows();
    const ids = now.map((r) => r.id);
    // A shown row leaves only when decided (the oldest are shown); a row that moves up
    // into view is not new: new is what the whole queue gained beyond what it lost.
    const removed = before.ids.filter((id) => !ids.includes(id)).length;
    const waiting = total();
    const added = Math.max(0, waiting - (before.total - removed));
    const parts = [];
    if (removed) parts.push(removed + " removed");
    if (added) parts.push(added + " new");
    parts.push(plural(waiting, "item") + " waiting");
    document.getElementById("queue-status").textContent = parts.join(", ");
    if (before.at >= 0 && (document.activeElement === document.body || !document.activeElement)) {
      const next = now[Math.min(before.at, now.length - 1)];
      const target = next ? next.querySelector("a[id]") : document.querySelector("#queue .empty");
      if (target) {
        if (!next) target.setAttribute("tabindex", "-1");
        target.focus();
      }
    }
    before = null;
  });
})();
