/* gatewayd console: the copy button, and greying out model boxes while "every model" is chosen. */
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-copy]").forEach(function (button) {
    button.addEventListener("click", function () {
      var field = document.getElementById(button.getAttribute("data-copy"));
      var done = function () { button.textContent = "Copied"; setTimeout(function () { button.textContent = "Copy"; }, 2000); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(field.value).then(done, function () { field.select(); document.execCommand("copy"); done(); });
      } else {
        field.select(); document.execCommand("copy"); done();
      }
    });
  });
  var checks = document.getElementById("model-checks");
  if (checks) {
    var radios = document.querySelectorAll('input[name="model_scope"]');
    var sync = function () {
      var selected = document.querySelector('input[name="model_scope"]:checked');
      checks.classList.toggle("disabled", !selected || selected.value !== "selected");
    };
    radios.forEach(function (r) { r.addEventListener("change", sync); });
    checks.addEventListener("change", function () {
      var only = document.querySelector('input[name="model_scope"][value="selected"]');
      if (only && checks.querySelector("input:checked")) { only.checked = true; sync(); }
    });
    sync();
  }
});
