#!/usr/bin/env bash
# Makes the benchmark fixture home: what the autorun guard's cost is measured against (the
# guard finds a home's git repositories at launch and guards their hooks and config, so its
# cost grows with the home). scripts/bench-exec.sh and scripts/bench-dispatcher.sh point HOME
# at this fixture to measure `sandboxer exec` and `dispatcher launch` with the guard on and
# off; the target (docs/performance.md) is that the guard adds at most 1 ms.
#
# The fixture is shaped like a person's home, with exactly 10 000 regular files outside the
# repositories' .git folders (the .git internals that `git init` makes come on top) and 50 git
# repositories:
#   - dotfiles and settings: shell start-up files, ~/.ssh, ~/.config/{git,fish,tmux,...}, the
#     coding CLIs' settings, ~/.local/{bin,share,state}
#   - caches and toolchains the guard's scan skips: ~/.cache (the bulk), ~/.npm, ~/.cargo,
#     ~/.rustup, ~/go
#   - src/: 40 repositories at src/<name> and 10 at src/work/<team>/<name>, each made by
#     `git init` (a real .git with hooks/ and config) and holding 120 files in nested folders
#   - Documents/, Downloads/, Pictures/, and projects/webapp, a project that is not a
#     repository, with a node_modules folder of 1 500 files
#
# Usage: scripts/bench-home.sh DIR
# Idempotent: when DIR/.bench-home-v1 exists (the last file written), it does nothing. DIR must
# otherwise be missing or empty, so a mistyped DIR never fills a real home. Needs bash and git;
# it spawns one process per repository and a few more, not one per file.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
home=$1
marker="$home/.bench-home-v1"
if [[ -e $marker ]]; then
  echo "bench-home: $home is already the fixture ($marker exists)"
  exit 0
fi
if [[ -e $home ]] && [[ -n $(ls -A "$home") ]]; then
  echo "bench-home: $home exists and is not empty; give a missing or empty folder" >&2
  exit 1
fi
command -v git >/dev/null || {
  echo "bench-home: needs git" >&2
  exit 1
}

TOTAL_FILES=10000
REPOS_AT_TOP=40
REPOS_IN_TEAMS=10
NODE_MODULES_FILES=1500

dirs=()  # every folder to make, made by one mkdir at the end of the plan
files=() # every file to make, relative to $home (the marker excluded)

dir() { dirs+=("$home/$1"); }
# file PATH...: files in folders already planned
file() { files+=("$@"); }
# many DIR PREFIX COUNT EXT: COUNT files named PREFIX-<i>.EXT in DIR
many() {
  local i
  dir "$1"
  for ((i = 0; i < $3; i++)); do files+=("$1/$2-$i.$4"); done
}

# Dotfiles and settings, the guard's own subject.
dir .
file .bashrc .bash_profile .bash_logout .profile .zshrc .zprofile .zshenv .zlogin \
  .gitconfig .tmux.conf .vimrc .inputrc .npmrc .pam_environment .claude.json .wget-hsts
dir .ssh && file .ssh/config .ssh/known_hosts .ssh/id_ed25519 .ssh/id_ed25519.pub .ssh/authorized_keys
dir .config/git && file .config/git/config .config/git/ignore
dir .config/fish/functions && file .config/fish/config.fish
many .config/fish/functions fn 6 fish
dir .config/fish/conf.d && file .config/fish/conf.d/path.fish
dir .config/tmux && file .config/tmux/tmux.conf
dir .config/nvim/lua/plugins && file .config/nvim/init.lua
many .config/nvim/lua/plugins plugin 12 lua
dir .config/Code/User && file .config/Code/User/settings.json .config/Code/User/keybindings.json
dir .config/systemd/user && file .config/systemd/user/backup.service .config/systemd/user/backup.timer
dir .config/autostart && file .config/autostart/syncthing.desktop
dir .config/environment.d && file .config/environment.d/10-path.conf
dir .config/opencode && file .config/opencode/opencode.json
dir .config/gh && file .config/gh/config.yml .config/gh/hosts.yml
dir .config/htop && file .config/htop/htoprc
dir .claude/commands && file .claude/settings.json .claude/CLAUDE.md
many .claude/commands cmd 4 md
dir .codex && file .codex/config.toml .codex/AGENTS.md
dir .gemini && file .gemini/settings.json .gemini/.env
dir .local/bin && file .local/bin/claude .local/bin/codex .local/bin/gemini .local/bin/sandboxer
many .local/share/applications app 20 desktop
many .local/share/fonts font 30 ttf
many .local/share/nvim/lazy/telescope.nvim/lua src 40 lua
many .local/share/Trash/files old 25 txt
many .local/share/Trash/info old 25 trashinfo
many .local/state/nvim/shada main 3 shada
many .local/lib/python3.12/site-packages/requests mod 20 py

# Toolchains the scan skips.
for d in registry/index/cache registry/src/serde-1.0 registry/src/tokio-1.0 bin; do
  many ".cargo/$d" f 50 rs
done
for d in toolchains/stable/lib toolchains/stable/bin toolchains/stable/share/doc; do
  many ".rustup/$d" f 40 bin
done
for d in _cacache/content-v2/sha512/aa _cacache/content-v2/sha512/bb _cacache/index-v5/cc; do
  many ".npm/$d" f 60 json
done
many go/pkg/mod/golang.org/x/text@v0.14.0 f 60 go

# Repositories: 120 files each in nested folders (8 at the top, 4 folders of 1 + 3x9).
repos=()
repo_files() {
  local r=$1 top sub
  dir "$r"
  file "$r/README.md" "$r/LICENSE" "$r/.gitignore" "$r/Makefile" "$r/Cargo.toml" \
    "$r/Cargo.lock" "$r/.editorconfig" "$r/CHANGELOG.md"
  for top in src tests docs scripts; do
    dir "$r/$top"
    file "$r/$top/index.md"
    for sub in core api util; do
      many "$r/$top/$sub" part 9 rs
    done
  done
  repos+=("$home/$r")
}
for ((i = 0; i < REPOS_AT_TOP; i++)); do repo_files "src/project-$i"; done
for ((i = 0; i < REPOS_IN_TEAMS; i++)); do repo_files "src/work/team-$((i % 3))/service-$i"; done

# Papers, downloads, pictures: nested, no repositories.
for y in 2021 2022 2023 2024 2025; do
  for m in taxes letters invoices; do many "Documents/$y/$m" doc 20 pdf; done
done
many Downloads dl 150 zip
for y in 2023 2024 2025; do
  for m in 01 04 07 10; do many "Pictures/$y/$m" img 16 jpg; done
done

# A project that is not a repository, with its node_modules.
many projects/webapp/src page 30 tsx
file projects/webapp/package.json
for ((p = 0; p < 50; p++)); do
  many "projects/webapp/node_modules/pkg-$p/lib" f $((NODE_MODULES_FILES / 50 - 2)) js
  many "projects/webapp/node_modules/pkg-$p/dist" f 2 js
done

# The cache fills the rest, so the count is exact: 0-f/0-f folders, as pip's and others' are.
cache=$((TOTAL_FILES - ${#files[@]} - 1)) # the marker is the last file
if ((cache < 256)); then
  echo "bench-home: the plan leaves $cache files for .cache; it needs at least 256" >&2
  exit 1
fi
hex=(0 1 2 3 4 5 6 7 8 9 a b c d e f)
n=0
for a in "${hex[@]}"; do
  for b in "${hex[@]}"; do
    per=$((cache / 256 + (n < cache % 256 ? 1 : 0)))
    many ".cache/pip/http/$a/$b" entry "$per" bin
    n=$((n + 1))
  done
done

mkdir -p "${dirs[@]}"
for f in "${files[@]}"; do
  : >"$home/$f"
done
printf '[user]\n\tname = Bench Person\n\temail = bench@example.invalid\n' >"$home/.gitconfig"
printf '# ~/.bashrc\nexport PATH="$HOME/.local/bin:$PATH"\n' >"$home/.bashrc"
for r in "${repos[@]}"; do
  git -c init.defaultBranch=main init -q "$r"
done
echo "bench-home v1: $TOTAL_FILES files outside .git, ${#repos[@]} repositories" >"$marker"

outside=$(find "$home" -name .git -prune -o -type f -print | wc -l)
all=$(find "$home" -type f | wc -l)
folders=$(find "$home" -name .git -prune -o -type d -print | wc -l)
gits=$(find "$home" -name .git -type d -prune -print | wc -l)
echo "bench-home: $home: $outside files outside .git folders ($all with .git internals)," \
  "$folders folders outside .git folders, $gits repositories"
