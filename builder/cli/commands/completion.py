"""assemble completion bash|zsh: a shell completion script generated from the real parser."""

from __future__ import annotations

import argparse

from builder.cli.args import Subparsers


def _words(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Subcommand -> its option strings (and recipe names where a recipe is expected)."""
    from builder.config.recipe import all_recipes

    recipes = [r.name for r in all_recipes()] + [a for r in all_recipes() for a in r.aliases]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sub.choices.items():
        opts = [o for a in p._actions for o in a.option_strings]
        takes_recipe = any(a.dest == "recipe_option" for a in p._actions)   # args.add_recipe
        out[name] = opts + (recipes if takes_recipe else [])
    return out


def script(shell: str) -> str:
    from builder.cli.main import parser

    p = parser()
    words = _words(p)
    top = [o for a in p._actions if not isinstance(a, argparse._SubParsersAction) for o in a.option_strings]
    cases = "\n".join(f'    {name}) opts="{" ".join(ws)}" ;;' for name, ws in sorted(words.items()))
    # the command is the first word that is not a flag: global flags may come before it
    body = f'''_assemble() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" opts i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${{COMP_WORDS[i]}}" in -*) ;; *) cmd=${{COMP_WORDS[i]}}; break ;; esac
  done
  if [ -z "$cmd" ]; then
    COMPREPLY=($(compgen -W "{' '.join(sorted(words))} {' '.join(top)}" -- "$cur")); return
  fi
  case "$cmd" in
{cases}
    *) opts="" ;;
  esac
  COMPREPLY=($(compgen -W "$opts" -- "$cur") $(compgen -f -- "$cur"))
}}
complete -F _assemble assemble
'''
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("completion", parents=[common], help="print a shell completion script",
                       description="Print a completion script for bash or zsh.",
                       epilog="examples:\n  source <(assemble completion bash)\n"
                              "  assemble completion zsh > ~/.zfunc/_assemble",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(script(args.shell), end="")
    return 0
