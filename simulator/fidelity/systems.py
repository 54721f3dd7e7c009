"""The data's names for the systems it measured — a silicon row's ``system`` and a kernel-table folder
(``kernels/<system>/...``) alike, as the data's source (aiconfigurator) names them — and the hardware profile each
is priced with. A system measured nowhere in ``../shared/data`` yet (H200, Blackwell) is its profile: its spec sheet
with its generation's fit, so another machine's tables or runs of it are validated, never skipped."""

SYSTEMS: dict[str, str] = {
    "a100_sxm": "a100-80gb-sxm", "h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200",
    "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300", "l40s": "l40s",
}
