"""The Kubernetes layer under mocks: operator release and values, metrics add-on and its IAM, tiers and quotas."""

from __future__ import annotations

import functools
import json

import pytest
import yaml
from conftest import stack_config, resolved_prices
from kube_checks import HELM_RELEASE, kube_objects, layer, release, run_layer, schema_version, validate_strict

from pricing import checks
from config import config, tags, tenancy, versions
from stacks.kubernetes import gpu_metrics, gpu_operator, k8s_provider

STACKS = ("dev", "prod")


def _one(rec, type_):
    found = rec.of_type(type_)
    assert len(found) == 1, f"expected one {type_}, found {len(found)}"
    return found[0]


def _objects(rec, kind):
    return [o for o in kube_objects(rec) if o["kind"] == kind]


# --- every declared Kubernetes object validates (strict: unknown fields fail) -------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_object_validates_strictly(stack):
    rec = layer(stack)
    version = stack_config(stack)["gpuloan:cluster"]["kubernetes_version"]
    objects = kube_objects(rec)
    assert {o["kind"] for o in objects} >= {
        "Namespace",
        "PriorityClass",
        "ResourceQuota",
        "LimitRange",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    for obj in objects:
        validate_strict(obj, version)


@functools.cache
def _time_sliced_dev():
    cfg = stack_config("dev")
    cfg["gpuloan:gpu_operator"] = {"time_slicing_replicas": 4}
    return run_layer("dev", cfg)


def test_time_slicing_configmap_validates_strictly():
    objects = kube_objects(_time_sliced_dev())
    assert any(o.get("kind") == "ConfigMap" for o in objects), "the time-slicing ConfigMap was not declared"
    for obj in objects:
        validate_strict(obj, "1.33")


def test_strict_validation_rejects_an_unknown_field():
    # Proves the validator is strict, so the tests above can fail.
    bad = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}, "spec": {"finalisers": []}}
    with pytest.raises(Exception, match="finalisers"):
        validate_strict(bad, "1.33")


def test_schema_version_is_the_cluster_minor_when_shipped_else_nearest():
    assert schema_version("1.33") == "1.33"
    assert schema_version("1.28") == "1.28"
    assert schema_version("1.24") == "1.25"  # oldest schema kubernetes-validate ships


def test_all_kubernetes_objects_use_the_explicit_kubernetes_provider():
    rec = layer("prod")
    k8s_resources = [r for r in rec.resources if r.type.startswith("kubernetes:")]
    assert k8s_resources
    for r in k8s_resources:
        assert "pulumi:providers:kubernetes::prod-k8s::" in r.provider, r.name


# --- provider ----------------------------------------------------------------------------------------------


def test_kubeconfig_authenticates_with_aws_eks_get_token_for_the_stack_region():
    rec = layer("prod")
    provider = _one(rec, "pulumi:providers:kubernetes")
    kubeconfig = json.loads(provider.inputs["kubeconfig"])
    cluster = kubeconfig["clusters"][0]["cluster"]
    assert cluster["server"].startswith("https://") and cluster["certificate-authority-data"]
    exec_ = kubeconfig["users"][0]["user"]["exec"]
    assert exec_["command"] == "aws"
    assert exec_["args"][:2] == ["eks", "get-token"]
    assert exec_["args"][exec_["args"].index("--cluster-name") + 1] == "gpuloan-prod"
    assert exec_["args"][exec_["args"].index("--region") + 1] == "us-east-1"
    # No static credential may sit in the kubeconfig (it is stored in state).
    assert "token" not in kubeconfig["users"][0]["user"]


def test_kubeconfig_is_a_pure_function_of_the_cluster():
    a = k8s_provider.kubeconfig("c", "https://e", "Q0E=", "eu-west-1")
    assert a == k8s_provider.kubeconfig("c", "https://e", "Q0E=", "eu-west-1")
    assert a["contexts"][0]["context"]["cluster"] == "c"


# --- GPU Operator --------------------------------------------------------------------------------------------


def test_gpu_operator_release_chart_repo_and_pinned_version():
    operator = release(layer("prod"), "gpu-operator")
    assert operator.inputs["chart"] == "gpu-operator"
    assert operator.inputs["repositoryOpts"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"
    assert operator.inputs["version"] == versions.GPU_OPERATOR_CHART_VERSION
    assert operator.inputs["namespace"] == gpu_operator.NAMESPACE


def test_chart_version_is_overridable_from_config():
    cfg = stack_config("dev")
    cfg["gpuloan:gpu_operator"] = {"chart_version": "v26.3.0"}
    assert release(run_layer("dev", cfg), "gpu-operator").inputs["version"] == "v26.3.0"


def test_helm_values_for_the_al2023_nvidia_ami():
    values = release(layer("prod"), "gpu-operator").inputs["values"]
    assert values["driver"]["enabled"] is False
    assert values["toolkit"]["enabled"] is False
    assert values["devicePlugin"]["enabled"] is True
    assert values["gfd"]["enabled"] is True and values["nfd"]["enabled"] is True
    assert values["mig"]["strategy"] == "none"
    assert values["migManager"]["enabled"] is False


def test_operator_dcgm_exporter_is_off_so_container_insights_is_the_one_exporter():
    values = release(layer("prod"), "gpu-operator").inputs["values"]
    assert values["dcgmExporter"]["enabled"] is False
    assert values["dcgm"]["enabled"] is False
    assert len(layer("prod").of_type("aws:eks/addon:Addon")) == 1


def test_operator_daemonsets_and_nfd_tolerate_gpu_and_spot_taints():
    values = release(layer("prod"), "gpu-operator").inputs["values"]
    for tolerations in (values["daemonsets"]["tolerations"], values["node-feature-discovery"]["worker"]["tolerations"]):
        keys = {(t["key"], t["operator"], t["effect"]) for t in tolerations}
        assert (tags.GPU_TAINT_KEY, "Exists", "NoSchedule") in keys
        assert (tags.SPOT_TAINT_KEY, "Exists", "NoSchedule") in keys


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Kubernetes' rule (core/v1 Toleration): same effect or none; Exists matches any value of the key."""
    return any(
        (t.get("effect") in (None, "", taint["effect"]))
        and t.get("key") == taint["key"]
        and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
        for t in tolerations
    )


def test_operator_daemonsets_and_nfd_tolerate_the_taints_the_policy_puts_on_gpu_nodes():
    """Issue 35 item 7: a device-plugin pod recreated on a node the policy tainted (back to spot, rebalance
    recommendation) must land there, with the exact taints the Lambda writes (policy/pods.py)."""
    from policy import pods as policy_pods

    values = release(layer("prod"), "gpu-operator").inputs["values"]
    for key in (policy_pods.BACK_TO_SPOT_TAINT_KEY, policy_pods.REBALANCE_TAINT_KEY):
        taint = {"key": key, "value": policy_pods.TAINT_VALUE, "effect": policy_pods.TAINT_EFFECT}
        assert _tolerates(values["daemonsets"]["tolerations"], taint), key
        assert _tolerates(values["node-feature-discovery"]["worker"]["tolerations"], taint), key


def test_the_metrics_exporter_keeps_its_chart_default_of_tolerating_every_taint():
    """The policy reads GPU utilization from the CloudWatch add-on's agent and DCGM exporter. The chart's default
    `tolerations: [{operator: Exists}]` (aws-observability/helm-charts, amazon-cloudwatch-observability
    values.yaml) lets them land on a node the policy tainted; a configuration that set tolerations would replace it,
    and a tainted node without an exporter reads as "no metrics = busy" and is never reclaimed."""
    (addon,) = layer("prod").of_type("aws:eks/addon:Addon")
    assert addon.inputs["addonName"] == "amazon-cloudwatch-observability"
    configuration = json.loads(addon.inputs["configurationValues"])

    def keys(node):
        if isinstance(node, dict):
            for k, v in node.items():
                yield k
                yield from keys(v)
        elif isinstance(node, list):
            for v in node:
                yield from keys(v)

    assert "tolerations" not in set(keys(configuration))


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_mig_strategy_from_config_enables_the_mig_manager(strategy):
    data = {**_gpuloan(stack_config("prod")), "gpu_operator": {"mig_strategy": strategy}}
    if strategy == "mixed":
        # mixed with Kueue on is refused (tests/config/test_config_hardening.py): MIG resources would never be admitted.
        data["scheduling"] = {"kueue": {"enabled": False}}
    cfg = checks.parse(data, prices=resolved_prices())
    values = gpu_operator.helm_values(cfg)
    assert values["mig"]["strategy"] == strategy
    assert values["migManager"]["enabled"] is True


def test_no_time_slicing_configmap_unless_configured():
    rec = layer("prod")
    assert _objects(rec, "ConfigMap") == []
    assert "config" not in release(rec, "gpu-operator").inputs["values"]["devicePlugin"]


def test_time_slicing_configmap_has_the_configured_replicas_and_is_referenced():
    rec = _time_sliced_dev()
    [cm] = _objects(rec, "ConfigMap")
    assert cm["metadata"] == {"name": gpu_operator.TIME_SLICING_CONFIGMAP, "namespace": gpu_operator.NAMESPACE}
    sharing = yaml.safe_load(cm["data"][gpu_operator.TIME_SLICING_PROFILE])["sharing"]["timeSlicing"]
    assert sharing["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    plugin = release(rec, "gpu-operator").inputs["values"]["devicePlugin"]
    assert plugin["config"]["name"] == cm["metadata"]["name"]
    assert plugin["config"]["default"] == gpu_operator.TIME_SLICING_PROFILE


def test_operator_disabled_declares_no_release():
    cfg = stack_config("dev")
    cfg["gpuloan:gpu_operator"] = {"enabled": False}
    rec = run_layer("dev", cfg)
    assert [r.inputs["chart"] for r in rec.of_type(HELM_RELEASE)] == [versions.KUEUE_CHART]
    assert "gpu_operator_chart_version" not in rec.outputs


# --- GPU metrics add-on ----------------------------------------------------------------------------------------


def test_cloudwatch_observability_addon_pinned_with_gpu_metrics_on():
    addon = _one(layer("prod"), "aws:eks/addon:Addon")
    assert addon.inputs["addonName"] == "amazon-cloudwatch-observability"
    assert addon.inputs["addonVersion"] == versions.CLOUDWATCH_OBSERVABILITY_ADDON_VERSION
    kube = json.loads(addon.inputs["configurationValues"])["agent"]["config"]["logs"]["metrics_collected"]["kubernetes"]
    assert kube == {"enhanced_container_insights": True, "accelerated_compute_metrics": True}


def test_agent_gets_its_role_through_pod_identity_for_its_service_account_only():
    rec = layer("prod")
    assoc = _one(rec, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("amazon-cloudwatch", "cloudwatch-agent")
    role = _one(rec, "aws:iam/role:Role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    [stmt] = trust["Statement"]
    assert stmt["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(stmt["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert stmt["Condition"]["StringEquals"] == {
        "aws:RequestTag/eks-cluster-name": "gpuloan-prod",
        "aws:RequestTag/kubernetes-namespace": "amazon-cloudwatch",
        "aws:RequestTag/kubernetes-service-account": "cloudwatch-agent",
    }


def test_agent_role_has_only_the_cloudwatch_agent_managed_policy():
    rec = layer("prod")
    [attachment] = rec.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert attachment.inputs["policyArn"] == "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"
    assert rec.of_type("aws:iam/rolePolicy:RolePolicy") == []
    # The partition comes from the region (stacks/cluster.py, shared with the node role's policies).
    assert gpu_metrics.managed_policy_arn("us-gov-west-1", gpu_metrics.CLOUDWATCH_AGENT_POLICY).startswith(
        "arn:aws-us-gov:iam::aws:policy/"
    )


def test_policy_default_metric_is_what_the_addon_publishes():
    policy = config.Policy()
    assert policy.metric_namespace == gpu_metrics.GPU_METRIC_NAMESPACE == "ContainerInsights"
    assert policy.utilization_metric == gpu_metrics.GPU_UTILIZATION_METRIC == "node_gpu_utilization"
    assert policy.reserved_metric == gpu_metrics.GPU_RESERVED_METRIC == "node_gpu_reserved_capacity"
    assert layer("prod").outputs["gpu_metric"] == "ContainerInsights/node_gpu_utilization"


# --- tiers, namespaces, quotas, RBAC -----------------------------------------------------------------------------


def test_priority_classes_order_and_preemption():
    classes = {o["metadata"]["name"]: o for o in _objects(layer("prod"), "PriorityClass")}
    prod, exp, learn = (classes[f"gpuloan-{t}"] for t in ("production", "experiment", "learning"))
    assert prod["value"] > exp["value"] > learn["value"] > 0
    assert prod["value"] < 1_000_000_000  # above that is reserved for system classes
    assert prod["preemptionPolicy"] == "PreemptLowerPriority"
    assert exp["preemptionPolicy"] == learn["preemptionPolicy"] == "Never"
    assert not any(c["globalDefault"] for c in classes.values())


@pytest.mark.parametrize("stack,teams", [("dev", ["research"]), ("prod", ["research", "serving"])])
def test_one_namespace_per_team(stack, teams):
    rec = layer(stack)
    names = sorted(
        o["metadata"]["name"]
        for o in _objects(rec, "Namespace")
        if o["metadata"]["name"] not in ("gpu-operator", "kueue-system")
    )
    assert names == teams
    assert rec.outputs["team_namespaces"] == teams


# Hand-computed: prod research = training's 2 p4d floor + 6 elastic, 8 GPUs each (64), plus experiments' 2 spot
# p4d (16) and the 8 GPUs it may borrow of the training floor (88: what Kueue can admit, docs/scheduling.md);
# serving = 2 + 8 g6e.xlarge, 1 GPU each; dev research = 1 + 4 g6/g5.xlarge, 1 GPU each.
@pytest.mark.parametrize("stack,expected", [("prod", {"research": 88, "serving": 10}), ("dev", {"research": 5})])
def test_gpu_quota_is_guaranteed_plus_elastic_max_gpus(stack, expected):
    quotas = {
        o["metadata"]["namespace"]: o["spec"]["hard"]
        for o in _objects(layer(stack), "ResourceQuota")
        if o["metadata"]["name"] == "gpus"
    }
    assert quotas == {team: {"requests.nvidia.com/gpu": str(n)} for team, n in expected.items()}


def test_gpu_quota_sums_every_pool_of_a_team_and_counts_gpus_per_node():
    cfg = stack_config("prod")
    pools = cfg["gpuloan:pools"]
    pools[1]["team"] = "research"  # research now owns both pools
    parsed = checks.from_stack_yaml({"config": cfg}, "test", prices=resolved_prices())
    assert tenancy.team_gpu_quota(parsed, "research") == 64 + 10 + 16 + 8  # experiments' spot and borrowing too
    assert resolved_prices().lookup("p4d.24xlarge").gpus == 8


def test_time_slicing_multiplies_the_quota_in_device_plugin_units():
    cfg = stack_config("dev")
    cfg["gpuloan:gpu_operator"] = {"time_slicing_replicas": 4}
    parsed = checks.from_stack_yaml({"config": cfg}, "test", prices=resolved_prices())
    assert tenancy.team_gpu_quota(parsed, "research") == 5 * 4


def test_team_cannot_use_priority_classes_above_its_pools_tier():
    rec = layer("dev")  # research's only pool is tier experiment
    [ceiling] = [o for o in _objects(rec, "ResourceQuota") if o["metadata"]["name"] == "tier-ceiling"]
    assert ceiling["spec"]["hard"] == {"pods": "0"}
    [expr] = ceiling["spec"]["scopeSelector"]["matchExpressions"]
    assert (expr["scopeName"], expr["operator"], expr["values"]) == ("PriorityClass", "In", ["gpuloan-production"])
    # prod teams are production-tier: no ceiling
    assert [o for o in _objects(layer("prod"), "ResourceQuota") if o["metadata"]["name"] == "tier-ceiling"] == []


def test_limit_range_gives_default_requests_but_no_default_gpu_or_limits():
    [lr] = _objects(layer("dev"), "LimitRange")
    [limit] = lr["spec"]["limits"]
    assert limit["type"] == "Container"
    assert set(limit["defaultRequest"]) == {"cpu", "memory"}
    assert "default" not in limit  # a default memory limit would OOM-kill jobs that did not set one


def test_policy_role_lists_pods_and_cordons_nodes_only_and_is_bound_to_the_policy_group():
    rec = layer("prod")
    # (the CI preview reader, stacks/gitops/ci_rbac.py, is another ClusterRole of the layer)
    [role] = [o for o in _objects(rec, "ClusterRole") if o["metadata"]["name"] == "gpuloan-policy-pod-reader"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        # the loan's usage (policy/loan_usage.py): get, by name, of this environment's queues
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "verbs": ["get"],
            "resourceNames": ["gpuloan-prod-inference", "gpuloan-prod-research", "gpuloan-prod-training"],
        },
    ]
    [binding] = [o for o in _objects(rec, "ClusterRoleBinding") if o["metadata"]["name"] == role["metadata"]["name"]]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": tags.POLICY_READER_GROUP}
    ]


def test_team_namespaces_enforce_baseline_pod_security_and_operator_namespace_is_privileged():
    namespaces = {o["metadata"]["name"]: o["metadata"]["labels"] for o in _objects(layer("prod"), "Namespace")}
    assert namespaces["research"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespaces["gpu-operator"]["pod-security.kubernetes.io/enforce"] == "privileged"


def _gpuloan(cfg: dict) -> dict:
    return {k.split(":", 1)[1]: v for k, v in cfg.items() if k.startswith("gpuloan:")}


def test_policy_role_grants_exactly_the_verbs_the_policy_client_uses():
    """Least privilege, both ways: every request policy/io/kube.py makes (pending pods, then before a termination:
    cordon, the node's pods, uncordon) is allowed by the role, and the role allows nothing it does not make."""
    import base64
    import urllib.parse

    from fake_kube import FakeKube, gpu_pod
    from policy.io.kube import KubeClient

    kube = FakeKube("c")
    try:
        kube.add_node("n1")
        kube.pods = [gpu_pod("a", 1, pool="p"), gpu_pod("b", 1, node_name="n1", phase="Running")]
        url = (
            "https://sts.us-east-1.amazonaws.com/?Action=GetCallerIdentity&X-Amz-SignedHeaders=host%3Bx-k8s-aws-id"
            "&X-Amz-Signature=abc"
        )
        client = KubeClient(
            kube.endpoint,
            kube.ca_pem,
            lambda: "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("="),
        )
        client.pending_gpus(["p"])
        assert client.cordon("n1") is True
        assert client.blockers("n1") == ["default/b requests 1 GPU(s)"]
        client.uncordon("n1")
    finally:
        kube.close()
    used: dict[str, set[str]] = {}
    for request in kube.requests:
        method, target = request.split(" ", 1)
        parts = urllib.parse.urlparse(target).path.strip("/").split("/")  # api, v1, <resource>[, <name>]
        resource, named = parts[2], len(parts) > 3
        verb = {"GET": "get" if named else "list", "PATCH": "patch"}[method]
        used.setdefault(resource, set()).add(verb)
    granted = {r: set(rule["verbs"]) for rule in tenancy.POLICY_RBAC_RULES for r in rule["resources"]}
    assert used == granted == {"pods": {"list"}, "nodes": {"get", "patch"}}
