// The Show code panel's Copy buttons (templates/_export.html): the snippet's text to the clipboard. Without the
// Clipboard API (a page served over plain http to another machine) the snippet is selected, for Ctrl+C.
if (!window.copyCode) {
  window.copyCode = true;
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-copy-code]");
    const pre = b && b.closest("details").querySelector(`pre[data-code-text="${b.dataset.copyCode}"]`);
    if (!pre) return;
    try { await navigator.clipboard.writeText(pre.textContent); } catch { getSelection().selectAllChildren(pre); return; }
    const label = b.textContent; b.textContent = b.dataset.done; setTimeout(() => { b.textContent = label; }, 1500);
  });
}
