"""A realistic 30-turn planning conversation (the Lisbon offsite), for the test and the example
in docs/embedded-writer.md that show what the embedded writer's notes read like."""

from __future__ import annotations

TITLE = "Lisbon team offsite"
TURNS = [
    ("user", "Hi! I'm organising the Lisbon team offsite for the platform team and want to "
             "keep track of the plan here."),
    ("assistant", "Happy to help. What do we know so far?"),
    ("user", "The offsite runs from 14 to 16 October. We expect 18 attendees."),
    ("assistant", "Noted: 14 to 16 October, 18 attendees. Do you have a venue budget?"),
    ("user", "The venue budget is 6000 euros, catering included."),
    ("assistant", "Got it, a venue budget of 6000 euros including catering. Should I "
                  "shortlist venues near Cais do Sodré?"),
    ("user", "Yes please, and keep it walkable from the hotel."),
    ("assistant", "I'll shortlist three venues within a 15 minute walk of the hotel by Friday."),
    ("user", "Joana is our travel coordinator, she books the flights and the hotel."),
    ("assistant", "Noted, Joana coordinates travel. Who approves the budget?"),
    ("user", "Pedro approves any spend above 5000 euros."),
    ("assistant", "Understood: Pedro signs off on spend above 5000 euros."),
    ("user", "We decided to go with the Hotel Baixa Central for everyone."),
    ("assistant", "Great, Hotel Baixa Central it is. How many rooms should Joana block?"),
    ("user", "Block 16 rooms, two people share."),
    ("assistant", "16 rooms at Hotel Baixa Central, noted."),
    ("user", "Actually, make it 17 rooms, Ana needs her own room."),
    ("assistant", "Updated to 17 rooms."),
    ("user", "I prefer a vegetarian-friendly dinner place, several of us don't eat meat."),
    ("assistant", "I'll keep the dinner options vegetarian-friendly."),
    ("user", "Flights must land before noon on 14 October."),
    ("assistant", "Noted: arrivals before noon on 14 October."),
    ("user", "What's the cancellation deadline for the hotel block?"),
    ("assistant", "The hotel block can be cancelled free of charge until 30 September."),
    ("user", "Should we add a half-day workshop on the 15th?"),
    ("assistant", "It depends on whether the venue has a breakout room, I will check."),
    ("user", "The attendee count changed, we are 20 attendees now."),
    ("assistant", "Updated: 20 attendees."),
    ("user", "Can you send Joana the final headcount by Wednesday?"),
    ("assistant", "I'll send Joana the final headcount of 20 by Wednesday."),
]
