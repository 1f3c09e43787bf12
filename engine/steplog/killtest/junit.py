"""The kill test as JUnit XML, for CI systems: one testcase per check of the storm, one per sweep
case."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from steplog.killtest.report import Report


def to_junit(report: Report) -> ET.ElementTree:
    suite = ET.Element(
        "testsuite", name=f"steplog killtest {report.agent}", time=f"{report.wall_time:.3f}"
    )
    cases = 0
    failures = 0
    skipped = 0
    if report.storm is not None:
        storm = report.storm
        if storm.error:
            case = ET.SubElement(
                suite, "testcase", classname="killtest.storm", name="storm finished"
            )
            ET.SubElement(case, "failure", message=storm.error)
            cases, failures = cases + 1, failures + 1
        for check in storm.verdict.checks:
            case = ET.SubElement(suite, "testcase", classname="killtest.storm", name=check.name)
            cases += 1
            if check.ok is False:
                failure = ET.SubElement(case, "failure", message=check.detail)
                found = storm.verdict.duplicates + storm.verdict.missing + storm.verdict.different
                failure.text = "\n".join(str(f) for f in found)
                failures += 1
            elif check.ok is None:
                ET.SubElement(case, "skipped", message=check.detail)
                skipped += 1
            else:
                ET.SubElement(case, "system-out").text = check.detail
    if report.sweep is not None:
        for sc in report.sweep.cases:
            case = ET.SubElement(suite, "testcase", classname="killtest.sweep", name=sc.name)
            cases += 1
            if not sc.passed:
                bad = [c for c in sc.verdict.checks if c.ok is False]
                message = sc.error or "; ".join(f"{c.name}: {c.detail}" for c in bad)
                failure = ET.SubElement(case, "failure", message=message)
                v = sc.verdict
                failure.text = "\n".join(str(f) for f in v.duplicates + v.missing + v.different)
                failures += 1
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites")
    root.append(suite)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    return tree


def write_junit(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    to_junit(report).write(path, encoding="utf-8", xml_declaration=True)
