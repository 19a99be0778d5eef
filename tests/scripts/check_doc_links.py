#!/usr/bin/env python3
"""Every relative link and image in README.md and docs/*.md must resolve: the file
exists and, for a #fragment, the target page has a heading with that anchor
(GitHub's rule: lower case, punctuation dropped, spaces to hyphens, -1, -2 for
repeats). Links to other sites are not fetched.

    check_doc_links.py REPO_ROOT
"""
import glob, os, re, sys

LINK = re.compile(r'!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)')

def strip_code(text):
    text = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)
    return re.sub(r'`[^`\n]*`', '', text)

def anchors(path):
    seen, out = {}, set()
    for line in strip_code(open(path, encoding='utf-8').read()).split('\n'):
        m = re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        slug = re.sub(r'[^\w\- ]', '', m.group(1).lower()).replace(' ', '-')
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f'{slug}-{n}')
    return out

def main(root):
    pages = [os.path.join(root, 'README.md')] + sorted(glob.glob(os.path.join(root, 'docs', '*.md')))
    bad, count = [], 0
    for page in pages:
        text = open(page, encoding='utf-8').read()
        # headings keep their backticked words; links inside code do not count
        for line in strip_code(text).split("\n"):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'[a-z]+:', target):
                    continue
                count += 1
                path, _, frag = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = os.path.relpath(page, root)
                if not os.path.exists(dest):
                    bad.append(f'{where}: link to {target}: {os.path.relpath(dest, root)} does not exist')
                elif frag and (not dest.endswith('.md') or frag not in anchors(dest)):
                    bad.append(f'{where}: link to {target}: no heading #{frag} in {os.path.relpath(dest, root)}')
    for b in bad:
        print(b, file=sys.stderr)
    print(f'{count} relative links in {len(pages)} pages, {len(bad)} broken')
    return 1 if bad else 0

if __name__ == '__main__':
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else '.'))
