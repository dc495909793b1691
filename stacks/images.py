"""CUDA images: one ECR repository per config image, built and pushed with the docker-build provider.

Plan first (STYLE.md 1): `plan_images(cfg)` is a pure function that turns the config's image matrix into build
plans (Dockerfile, build args, content-hashed tags, platforms); `CudaImages` only declares the resources.
Compatibility (driver / CUDA / wheel / Python / GPU architecture) was already checked when the config was
parsed (config/compat.py), so every plan here is for an image the nodes can run.

Per image: the base Dockerfile (images/base: CUDA runtime + Python + non-root user) is pushed as
`base-<versions>-<hash>`; when the image has PyTorch or packages, the framework Dockerfile (images/framework)
builds on that exact base digest and is pushed as `<versions>-<hash>`. The hash covers everything that goes into
the pushed image (`BuildPlan.pushed_inputs`: every file of the build context, the build args, the platforms and
the labels; the framework's also the base's tag), so anything that changes what is pushed is a new tag. That
matters because tags are immutable: pushing different content under an existing tag fails with
ImageTagAlreadyExistsException (a PyTorch version change used to relabel the base under the same base tag).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_docker_build as docker_build

from config import compat, versions
from config.config import GpuLoanConfig, Image

REPO_ROOT = Path(__file__).resolve().parent.parent
# Relative to the project root (where Pulumi runs the program), so the inputs are the same on every machine.
BASE_DIR = Path("images/base")
FRAMEWORK_DIR = Path("images/framework")

# Build cache tags are overwritten by every build, so they are the one exception to immutable tags.
CACHE_TAG_PREFIX = "buildcache-"
# Lifecycle: only untagged manifests expire (a build cache replaced by a newer one, an image whose tag moved),
# after a week. Nothing that carries a tag is ever selected, so no image a stack runs and no current build cache
# can expire; and ECR does not expire an untagged manifest that a tagged image index still references ("If an
# image is referenced by a manifest list, it cannot be expired ... without the manifest list being deleted
# first", ECR lifecycle evaluation rules), so multi-platform children and attestations stay with their index.
# There is deliberately no count cap: a "keep the newest N" rule also counts live tags and build caches.
UNTAGGED_EXPIRE_DAYS = 7

PLATFORM_OF_CPU = {"x86_64": docker_build.Platform.LINUX_AMD64, "arm64": docker_build.Platform.LINUX_ARM64}


@dataclass(frozen=True)
class BuildPlan:
    dockerfile: Path
    build_args: dict[str, str]  # BASE_IMAGE is added at deploy time (the pushed base's digest ref)
    tag: str
    cache_tag: str
    platforms: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    context_digest: str = ""  # sha256 over every file of the build context (the Dockerfile's directory)
    parent_tag: str = ""  # the framework's base tag (its BASE_IMAGE)

    def pushed_inputs(self) -> dict:
        """Everything that decides what is pushed under `tag` (the tag is a hash of exactly this)."""
        return {
            "dockerfile": str(self.dockerfile),
            "context": self.context_digest,
            "build_args": self.build_args,
            "platforms": list(self.platforms),
            "labels": self.labels,
            "parent": self.parent_tag,
        }


@dataclass(frozen=True)
class ImagePlan:
    name: str
    repository_name: str
    platforms: tuple[str, ...]
    base: BuildPlan
    framework: BuildPlan | None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def final(self) -> BuildPlan:
        return self.framework or self.base


def context_digest(directory: Path) -> str:
    """sha256 of every file under a build context (relative path and bytes), in a stable order."""
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        h.update(path.relative_to(directory).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _build(
    dockerfile: Path,
    args: dict[str, str],
    platforms: tuple[str, ...],
    labels: dict[str, str],
    tag_prefix: str,
    cache_tag: str,
    parent_tag: str = "",
) -> BuildPlan:
    plan = BuildPlan(
        dockerfile, args, "", cache_tag, platforms, labels, context_digest(REPO_ROOT / dockerfile.parent), parent_tag
    )
    tag = f"{tag_prefix}-{content_hash(plan.pushed_inputs())}"
    return BuildPlan(dockerfile, args, tag, cache_tag, platforms, labels, plan.context_digest, parent_tag)


def content_hash(*parts: str | bytes | dict) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, dict):
            part = json.dumps(part, sort_keys=True)
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def platforms_for(cfg: GpuLoanConfig) -> tuple[str, ...]:
    """Docker platforms of every GPU instance type any pool may run (Graviton g5g -> linux/arm64)."""
    cpus = set()
    for pool in cfg.pools:
        names = ([pool.guaranteed.instance_type] if pool.guaranteed else []) + (
            list(pool.elastic.instance_types) if pool.elastic else []
        )
        for name in names:
            itype = cfg.instance_type(name)
            if itype is not None:
                cpus.add(itype.cpu_architecture)
    return tuple(sorted(PLATFORM_OF_CPU[c].value for c in cpus)) or (docker_build.Platform.LINUX_AMD64.value,)


def plan_image(cfg: GpuLoanConfig, img: Image) -> ImagePlan:
    cuda = compat.parse_version(img.cuda_version)
    python_patch = versions.IMAGE_PYTHON_PATCH[img.python_version]
    base_args = {
        "CUDA_VERSION": img.cuda_version,
        "UBUNTU_VERSION": versions.CUDA_IMAGE_UBUNTU[cuda[0]],
        "PYTHON_VERSION": python_patch,
        "PIP_VERSION": versions.IMAGE_PIP_VERSION,
        "UV_VERSION": versions.IMAGE_UV_VERSION,
    }
    platforms = platforms_for(cfg)
    versions_part = f"cuda{img.cuda_version}-py{python_patch}"
    # The base carries only labels about the base: a PyTorch label on it would change the base image (and so
    # need a new base tag) whenever PyTorch changes.
    base_labels = {
        "org.opencontainers.image.title": img.name,
        "io.gpuloan.cuda-version": img.cuda_version,
        "io.gpuloan.python-version": python_patch,
    }
    base = _build(
        BASE_DIR / "Dockerfile", base_args, platforms, base_labels, f"base-{versions_part}", f"{CACHE_TAG_PREFIX}base"
    )

    framework = None
    labels = dict(base_labels)
    if img.pytorch is not None or img.packages:
        fw_args = {
            "TORCH_VERSION": img.pytorch.version if img.pytorch else "",
            "TORCH_CUDA_TAG": img.pytorch.cuda_tag if img.pytorch else "",
            "TORCH_EXPECTED_CUDA": compat.fmt(compat.cuda_of_tag(img.pytorch.cuda_tag)) if img.pytorch else "",
            "EXTRA_PACKAGES": " ".join(img.packages),
        }
        if img.pytorch:
            versions_part += f"-torch{img.pytorch.version}-{img.pytorch.cuda_tag}"
            labels["io.gpuloan.pytorch-version"] = f"{img.pytorch.version}+{img.pytorch.cuda_tag}"
        framework = _build(
            FRAMEWORK_DIR / "Dockerfile",
            fw_args,
            platforms,
            labels,
            versions_part,
            f"{CACHE_TAG_PREFIX}framework",
            parent_tag=base.tag,
        )
    return ImagePlan(img.name, f"gpuloan/{cfg.environment}/{img.name}", platforms, base, framework, labels)


def plan_images(cfg: GpuLoanConfig) -> list[ImagePlan]:
    return [plan_image(cfg, img) for img in cfg.images]


def lifecycle_policy() -> str:
    return json.dumps(
        {
            "rules": [
                {
                    "rulePriority": 1,
                    "description": f"expire untagged manifests after {UNTAGGED_EXPIRE_DAYS} days",
                    "selection": {
                        "tagStatus": "untagged",
                        "countType": "sinceImagePushed",
                        "countUnit": "days",
                        "countNumber": UNTAGGED_EXPIRE_DAYS,
                    },
                    "action": {"type": "expire"},
                },
            ]
        }
    )


@dataclass(frozen=True)
class CudaImagesArgs:
    # The image matrix (`images:`) and the pools' instance types, whose architectures the images are built for.
    cfg: GpuLoanConfig

    @staticmethod
    def from_config(cfg: GpuLoanConfig) -> CudaImagesArgs:
        return CudaImagesArgs(cfg)


class CudaImages(pulumi.ComponentResource):
    """ECR repositories (scan on push, immutable tags, KMS) and docker-build images for cfg.images."""

    image_uris: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: CudaImagesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpuloan:images:CudaImages", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)
        self.plans = plan_images(cfg)
        self.repositories: dict[str, aws.ecr.Repository] = {}
        self.images: dict[str, docker_build.Image] = {}
        uris: dict[str, pulumi.Output[str]] = {}

        self.key = aws.kms.Key(
            f"{name}-ecr",
            description=f"gpuloan {cfg.environment}: encrypts the CUDA image repositories",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=child,
        )
        for plan in self.plans:
            repo = aws.ecr.Repository(
                f"{name}-{plan.name}",
                name=plan.repository_name,
                image_tag_mutability="IMMUTABLE_WITH_EXCLUSION",
                image_tag_mutability_exclusion_filters=[
                    aws.ecr.RepositoryImageTagMutabilityExclusionFilterArgs(
                        filter=f"{CACHE_TAG_PREFIX}*", filter_type="WILDCARD"
                    )
                ],
                image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(scan_on_push=True),
                encryption_configurations=[
                    aws.ecr.RepositoryEncryptionConfigurationArgs(encryption_type="KMS", kms_key=self.key.arn)
                ],
                # ECR refuses to delete a repository that still holds images (RepositoryNotEmptyException), and
                # the build caches belong to no Pulumi resource: without this `pulumi destroy` stops here.
                # Every image is rebuilt from the repository's Dockerfiles and pins.
                force_delete=True,
                opts=child,
            )
            aws.ecr.LifecyclePolicy(
                f"{name}-{plan.name}-lifecycle", repository=repo.name, policy=lifecycle_policy(), opts=child
            )
            self.repositories[plan.name] = repo

            token = aws.ecr.get_authorization_token_output(
                registry_id=repo.registry_id, opts=pulumi.InvokeOutputOptions(parent=self)
            )
            registry = docker_build.RegistryArgs(
                address=repo.repository_url.apply(lambda url: url.split("/", 1)[0]),
                username=token.user_name,
                password=pulumi.Output.secret(token.password),
            )
            base = self._build(f"{name}-{plan.name}-base-image", plan, plan.base, repo, registry, {})
            final = base
            if plan.framework is not None:
                final = self._build(
                    f"{name}-{plan.name}-image",
                    plan,
                    plan.framework,
                    repo,
                    registry,
                    {"BASE_IMAGE": base.ref},
                    depends_on=[base],
                )
            self.images[plan.name] = final
            uris[plan.name] = final.ref

        self.image_uris = pulumi.Output.all(**uris) if uris else pulumi.Output.from_input({})
        self.repository_urls = (
            pulumi.Output.all(**{n: r.repository_url for n, r in self.repositories.items()})
            if self.repositories
            else pulumi.Output.from_input({})
        )
        self.register_outputs({"image_uris": self.image_uris, "repository_urls": self.repository_urls})

    def _build(
        self,
        resource_name: str,
        plan: ImagePlan,
        build: BuildPlan,
        repo: aws.ecr.Repository,
        registry: docker_build.RegistryArgs,
        extra_args: dict,
        depends_on=None,
    ) -> docker_build.Image:
        url = repo.repository_url
        return docker_build.Image(
            resource_name,
            context=docker_build.BuildContextArgs(location=str(build.dockerfile.parent)),
            dockerfile=docker_build.DockerfileArgs(location=str(build.dockerfile)),
            build_args={**build.build_args, **extra_args},
            platforms=[docker_build.Platform(p) for p in build.platforms],
            tags=[url.apply(lambda u: f"{u}:{build.tag}")],
            labels=build.labels,  # part of the tag's hash (BuildPlan.pushed_inputs)
            push=True,
            # A CUDA + PyTorch build takes many minutes and GBs; a PR preview shows the new tag instead.
            build_on_preview=False,
            registries=[registry],
            cache_from=[
                docker_build.CacheFromArgs(
                    registry=docker_build.CacheFromRegistryArgs(ref=url.apply(lambda u: f"{u}:{build.cache_tag}"))
                )
            ],
            # ECR accepts registry caches only as an OCI image manifest.
            cache_to=[
                docker_build.CacheToArgs(
                    registry=docker_build.CacheToRegistryArgs(
                        ref=url.apply(lambda u: f"{u}:{build.cache_tag}"),
                        mode=docker_build.CacheMode.MAX,
                        image_manifest=True,
                        oci_media_types=True,
                    )
                )
            ],
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on or []),
        )
