"""Screenshot a dashboard in headless Chromium (Debian's), e.g. for docs/:

python scripts/screenshot_dashboard.py dashboards/<run-id>.html docs/dashboard-demo.png [TOP_PX]

TOP_PX: only the top of the page, that many pixels (the whole page otherwise).
"""

import sys

from roseprof.render.headless import chromium_page, load_dashboard


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src, dst = sys.argv[1:3]
    top = int(sys.argv[3]) if len(sys.argv) == 4 else None
    with chromium_page(width=1400, height=900) as page:
        result = load_dashboard(page, src)
        if result["errors"]:
            print(f"dashboard errors: {result['errors']}", file=sys.stderr)
            return 1
        page.wait_for_timeout(500)
        clip = {"x": 0, "y": 0, "width": 1400, "height": top} if top else None
        page.screenshot(path=dst, full_page=True, clip=clip)
    print(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
