"""Known vulnerabilities in a locked requirements file, with pip-audit and PyPI's advisory database.

Usage: python .ci/audit.py PIP_AUDIT REQUIREMENTS. Exits 1 when a locked version has a known vulnerability.
Where the database cannot be reached (an offline builder, a registry mirror without PyPI's JSON API), pip-audit
reports every package as not found: that is said in one line and the check is skipped (exit 0), since nothing
was checked. Any other failure of pip-audit itself is an error.
"""

from __future__ import annotations

import json
import subprocess
import sys


def main(pip_audit: str, requirements: str) -> int:
    command = [pip_audit, "-r", requirements, "--require-hashes", "--disable-pip", "-s", "pypi", "-f", "json"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    try:
        report = json.loads(run.stdout)
    except json.JSONDecodeError:
        print(f"audit: pip-audit failed (exit {run.returncode}): {run.stderr.strip()[-500:]}", file=sys.stderr)
        return 2
    packages = report.get("dependencies", [])
    audited = [p for p in packages if "skip_reason" not in p]
    if packages and not audited:
        print(
            f"audit: skipped: PyPI's advisory database is not reachable from here ({len(packages)} packages "
            "could not be looked up); run `make audit` where it is"
        )
        return 0
    found = [(p["name"], p["version"], v) for p in audited for v in p.get("vulns", [])]
    for name, version, vuln in found:
        fixed = ", ".join(vuln.get("fix_versions") or []) or "no fixed release yet"
        print(f"audit: {name} {version}: {vuln['id']} (fixed in {fixed})")
    skipped = len(packages) - len(audited)
    print(f"audit: {len(audited)} packages checked, {skipped} not found, {len(found)} known vulnerabilities")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
