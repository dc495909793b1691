"""docs/kubernetes.md and docs/metrics.md: their commands run, their names match the code."""

from __future__ import annotations

import re
import shlex
import subprocess

from conftest import REPO

from config import versions
from config import tenancy
from stacks.kubernetes import gpu_metrics, gpu_operator

KUBERNETES_MD = (REPO / "docs" / "kubernetes.md").read_text()
METRICS_MD = (REPO / "docs" / "metrics.md").read_text()


def _bash_lines(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_documented_kubernetes_validate_command_runs_and_checks_every_example():
    [cmd] = [c for c in _bash_lines(KUBERNETES_MD) if "kubernetes-validate" in c]
    argv = shlex.split(cmd)
    documented = {a for a in argv if a.startswith("docs/workloads/")}
    assert documented == {str(p.relative_to(REPO)) for p in (REPO / "docs" / "workloads").glob("*.yaml")}
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout + result.stderr


def test_docs_name_what_the_code_declares():
    for tier in tenancy.PRIORITY_VALUES:
        name = tenancy.priority_class_name(tier)
        row = next(line for line in KUBERNETES_MD.splitlines() if line.startswith(f"| `{name}`"))
        assert f"{tenancy.PRIORITY_VALUES[tier]:,}" in row and tenancy.PREEMPTION_POLICIES[tier] in row
    assert gpu_operator.TIME_SLICING_CONFIGMAP in KUBERNETES_MD
    assert tenancy.POLICY_READER_CLUSTER_ROLE in KUBERNETES_MD
    assert versions.GPU_OPERATOR_CHART_REPO in KUBERNETES_MD


def test_metrics_doc_names_the_published_metric_and_dimensions():
    assert f"`{gpu_metrics.GPU_METRIC_NAMESPACE}`" in METRICS_MD
    for metric in gpu_metrics.GPU_NODE_METRICS:
        assert f"`{metric}`" in METRICS_MD
    assert "`ClusterName, InstanceId, NodeName`" in METRICS_MD
    assert gpu_metrics.ADDON_NAME in METRICS_MD and gpu_metrics.CLOUDWATCH_AGENT_POLICY in METRICS_MD
